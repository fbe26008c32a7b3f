package benchkit

import (
	"fmt"
	"strconv"
	"strings"
)

// HelpDefaults returns, for each of names that has one, the default that
// the operator's --help shows for it: "(default X)" at the end of the line
// of the flag (pflag's layout), as (name, X).
func HelpDefaults(help string, names []string) [][2]string {
	var out [][2]string
	for _, name := range names {
		for line := range strings.Lines(help) {
			f := strings.Fields(line)
			if len(f) == 0 || f[0] != "--"+name {
				continue
			}
			line = strings.TrimSpace(line)
			if i := strings.LastIndex(line, "(default "); i >= 0 && strings.HasSuffix(line, ")") {
				out = append(out, [2]string{name, strings.Trim(line[i+len("(default "):len(line)-1], `"`)})
			}
			break
		}
	}
	return out
}

// InEffect renders each of defaults (flag name, value) as --name=value,
// the value taken from the last --name=value of flags when there is one.
func InEffect(flags []string, defaults [][2]string) string {
	parts := make([]string, 0, len(defaults))
	for _, d := range defaults {
		parts = append(parts, "--"+d[0]+"="+FlagValue(flags, d[0], d[1]))
	}
	return strings.Join(parts, " ")
}

// FlagValue returns the value of the last --name=value of flags, else def.
func FlagValue(flags []string, name, def string) string {
	for _, f := range flags {
		if v, ok := strings.CutPrefix(f, "--"+name+"="); ok {
			def = v
		}
	}
	return def
}

// ParseCounts reads a comma-separated list of counts, "0,10,100"; an empty
// or blank string is none.
func ParseCounts(s string) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		k, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("not a list of counts: %q: %w", s, err)
		}
		out = append(out, k)
	}
	return out, nil
}

// ListFlag is a repeatable string flag (flag.Var).
type ListFlag []string

func (l *ListFlag) String() string { return strings.Join(*l, " ") }

// Set adds one value.
func (l *ListFlag) Set(v string) error { *l = append(*l, v); return nil }
