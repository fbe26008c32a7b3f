package act

import (
	"errors"
	"testing"
)

// TestPartError: the in-database errors say which part failed and keep
// what they wrap (a wait stays a wait).
func TestPartError(t *testing.T) {
	err := error(&PartError{Part: PartConfig, Err: errors.Join(errors.New("pod x: work_mem is 4MB, want 8MB"), ErrWaiting)})
	var part *PartError
	if !errors.As(err, &part) || part.Part != PartConfig || !errors.Is(err, ErrWaiting) {
		t.Errorf("%v: part %+v, waiting %v", err, part, errors.Is(err, ErrWaiting))
	}
}

func TestSplitKey(t *testing.T) {
	for _, tt := range []struct {
		key, ns, name string
		ok            bool
	}{
		{"ns/db", "ns", "db", true},
		{"db", "", "", false},
		{"/db", "", "", false},
		{"ns/", "", "", false},
		{"ns/a/b", "", "", false},
	} {
		ns, name, err := SplitKey(tt.key)
		if (err == nil) != tt.ok || ns != tt.ns || name != tt.name {
			t.Errorf("SplitKey(%q) = %q, %q, %v", tt.key, ns, name, err)
		}
	}
}
