package status

import (
	"io"
	"os"

	"golang.org/x/term"
)

// UseColor reports whether output to w should be coloured: only when w is
// a terminal, and never when NO_COLOR is set to anything but the empty
// string (https://no-color.org). getenv is os.Getenv outside tests.
func UseColor(w io.Writer, getenv func(string) string) bool {
	if getenv("NO_COLOR") != "" {
		return false
	}
	f, ok := w.(*os.File)
	return ok && isTerminal(f)
}

// isTerminal is replaced in tests, where no output is a terminal.
var isTerminal = func(f *os.File) bool { return term.IsTerminal(int(f.Fd())) }
