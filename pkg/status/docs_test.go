package status

import (
	"os"
	"regexp"
	"testing"
)

// TestDocs keeps the outputs shown in docs/status.md equal to the golden
// files they are copied from: every block between
// <!-- golden:NAME --> and <!-- /golden --> is testdata/NAME in a code
// fence. -update rewrites the blocks.
func TestDocs(t *testing.T) {
	const path = "../../docs/status.md"
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile("(?s)<!-- golden:([^ ]+) -->\n.*?<!-- /golden -->")
	var missing error
	want := block.ReplaceAllStringFunc(string(raw), func(m string) string {
		name := block.FindStringSubmatch(m)[1]
		g, err := os.ReadFile("testdata/" + name)
		if err != nil {
			missing = err
			return m
		}
		return "<!-- golden:" + name + " -->\n```\n" + string(g) + "```\n<!-- /golden -->"
	})
	if missing != nil {
		t.Fatal(missing)
	}
	if n := len(block.FindAllString(want, -1)); n < 4 {
		t.Errorf("%s shows %d golden outputs, want at least 4 (list, wide, detail, watch)", path, n)
	}
	if *update {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if string(raw) != want {
		t.Errorf("%s is out of date with testdata/: run go test ./pkg/status/ -update", path)
	}
}
