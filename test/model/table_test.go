package model

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the model's tables in docs/worker-question.md")

// docPath is the page that shows the model's tables.
const docPath = "../../docs/worker-question.md"

// TestTable checks that docs/worker-question.md shows what the model gives
// today; with -update (`make model`) it rewrites the generated blocks.
func TestTable(t *testing.T) {
	e := DefaultExperiment()
	rows := e.Run()
	blocks := map[string]string{
		"setup":       Setup(e),
		"summary":     Summary(rows),
		"table":       Markdown(rows),
		"sensitivity": Summary(SensitivityExperiment().Run()),
	}
	doc, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	got, err := replaceBlocks(string(doc), blocks)
	if err != nil {
		t.Fatalf("%s: %v", docPath, err)
	}
	if *update {
		if got != string(doc) {
			if err := os.WriteFile(docPath, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return
	}
	if got != string(doc) {
		t.Errorf("%s is out of date with the model: run `make model`", docPath)
	}
}

// replaceBlocks replaces the body of each generated block, between the line
// that starts with "<!-- model:NAME:begin" and "<!-- model:NAME:end -->".
func replaceBlocks(doc string, blocks map[string]string) (string, error) {
	names := make([]string, 0, len(blocks))
	for name := range blocks {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		begin, end := "<!-- model:"+name+":begin", "<!-- model:"+name+":end -->"
		i := strings.Index(doc, begin)
		if i < 0 {
			return "", fmt.Errorf("no %q marker", begin)
		}
		nl := strings.IndexByte(doc[i:], '\n')
		if nl < 0 {
			return "", fmt.Errorf("%q marker ends the file", begin)
		}
		bodyStart := i + nl + 1
		k := strings.Index(doc[bodyStart:], end)
		if k < 0 {
			return "", fmt.Errorf("no %q marker after %q", end, begin)
		}
		doc = doc[:bodyStart] + blocks[name] + doc[bodyStart+k:]
	}
	return doc, nil
}

func TestReplaceBlocks(t *testing.T) {
	doc := "a\n<!-- model:x:begin (generated) -->\nold\n<!-- model:x:end -->\nb\n"
	got, err := replaceBlocks(doc, map[string]string{"x": "new\n"})
	if want := "a\n<!-- model:x:begin (generated) -->\nnew\n<!-- model:x:end -->\nb\n"; err != nil || got != want {
		t.Errorf("replaceBlocks = %q, %v; want %q", got, err, want)
	}
	if _, err := replaceBlocks(doc, map[string]string{"y": ""}); err == nil {
		t.Error("a missing block was not reported")
	}
}

// designPath shows the state diagram; fsmPath is where it is generated
// (`make generate-docs`, from pkg/fsm).
const (
	designPath = "../../docs/design.md"
	fsmPath    = "../../docs/fsm.md"
)

// TestDesignDiagram checks that docs/design.md shows the state diagram of
// docs/fsm.md; with -update (`make model`) it copies it.
func TestDesignDiagram(t *testing.T) {
	fsmDoc, err := os.ReadFile(fsmPath)
	if err != nil {
		t.Fatal(err)
	}
	const open = "```mermaid\n"
	i := strings.Index(string(fsmDoc), open)
	if i < 0 {
		t.Fatalf("%s: no mermaid diagram", fsmPath)
	}
	j := strings.Index(string(fsmDoc)[i+len(open):], "```\n")
	if j < 0 {
		t.Fatalf("%s: the mermaid diagram does not end", fsmPath)
	}
	diagram := string(fsmDoc)[i : i+len(open)+j+len("```\n")]
	doc, err := os.ReadFile(designPath)
	if err != nil {
		t.Fatal(err)
	}
	got, err := replaceBlocks(string(doc), map[string]string{"fsm-diagram": diagram})
	if err != nil {
		t.Fatalf("%s: %v", designPath, err)
	}
	if *update {
		if got != string(doc) {
			if err := os.WriteFile(designPath, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return
	}
	if got != string(doc) {
		t.Errorf("%s does not show the diagram of %s: run `make model`", designPath, fsmPath)
	}
}
