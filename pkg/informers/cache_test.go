package informers

import (
	"slices"
	"testing"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// Postgresqls returns the clusters of one namespace, which the cleanup
// reads to tell whether its cluster is the namespace's last.
func TestPostgresqlsOfNamespace(t *testing.T) {
	c1, c2, other := newPG("c1", 1), newPG("c2", 1), newPG("c3", 1)
	other.Namespace = "elsewhere"
	inf, _, _ := start(t, Options{}, discard{}, []*v1.Postgresql{c1, c2, other})
	var names []string
	for _, pg := range inf.Postgresqls(c1.Namespace) {
		names = append(names, pg.Name)
	}
	slices.Sort(names)
	if want := []string{"c1", "c2"}; !slices.Equal(names, want) {
		t.Errorf("postgresqls of %s: %v, want %v", c1.Namespace, names, want)
	}
	if got := inf.Postgresqls("none"); len(got) != 0 {
		t.Errorf("postgresqls of an empty namespace: %v", got)
	}
}
