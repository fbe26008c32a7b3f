package testbed

import (
	"slices"
	"testing"
)

func TestSplitRule(t *testing.T) {
	for _, c := range []struct {
		line string
		want []string
	}{
		{"-N KUBE-SERVICES\n", []string{"-N", "KUBE-SERVICES"}},
		{`-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES` + "\n",
			[]string{"-A", "PREROUTING", "-m", "comment", "--comment", "kubernetes service portals", "-j", "KUBE-SERVICES"}},
		{`-A X -m comment --comment "a \"quoted\" word" -j Y`, []string{"-A", "X", "-m", "comment", "--comment", `a "quoted" word`, "-j", "Y"}},
		{`-A X --comment "" -j Y`, []string{"-A", "X", "--comment", "", "-j", "Y"}},
	} {
		if got := splitRule(c.line); !slices.Equal(got, c.want) {
			t.Errorf("splitRule(%q) = %q, want %q", c.line, got, c.want)
		}
	}
}
