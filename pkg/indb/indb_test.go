package indb

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/pgloop/pgloop/pkg/cluster"
)

func TestSameSetting(t *testing.T) {
	for _, c := range []struct {
		current, want string
		same          bool
	}{
		{"8MB", "8MB", true},
		{"8MB", "8mb", true},
		{"on", "true", true},
		{"off", "0", true},
		{"on", "off", false},
		{"8MB", "16MB", false},
		{"8192kB", "8MB", false}, // PostgreSQL shows units its own way: pg_file_settings decides then
	} {
		if got := sameSetting(c.current, c.want); got != c.same {
			t.Errorf("sameSetting(%q, %q) = %v, want %v", c.current, c.want, got, c.same)
		}
	}
}

// TestPasswords: a Secret in the middle of a rotation offers its current
// password first, then the one being set.
func TestPasswords(t *testing.T) {
	s := &corev1.Secret{Data: map[string][]byte{cluster.SecretPasswordKey: []byte("old")}}
	if got := passwords(s); !slices.Equal(got, []string{"old"}) {
		t.Errorf("passwords = %q", got)
	}
	s.Data[cluster.SecretNextPasswordKey] = []byte("new")
	if got := passwords(s); !slices.Equal(got, []string{"old", "new"}) {
		t.Errorf("passwords during a rotation = %q", got)
	}
}
