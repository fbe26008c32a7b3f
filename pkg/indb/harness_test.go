package indb

import (
	"io"
	"testing"

	"github.com/sirupsen/logrus"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	pgfake "github.com/pgloop/pgloop/pkg/generated/clientset/versioned/fake"
	"github.com/pgloop/pgloop/pkg/internal/samples"
)

// harness is one Actor on fake clientsets, reading the API (no Cache).
type harness struct {
	kube *fake.Clientset
	pgc  *pgfake.Clientset
	a    *Actor
}

// newHarness returns an Actor over the resources pgs and the objects objs.
func newHarness(t *testing.T, pgs []*v1.Postgresql, objs ...runtime.Object) *harness {
	t.Helper()
	log := logrus.New()
	log.SetOutput(io.Discard)
	var pgObjs []runtime.Object
	for _, pg := range pgs {
		pgObjs = append(pgObjs, pg.DeepCopy())
	}
	h := &harness{kube: fake.NewClientset(objs...), pgc: pgfake.NewSimpleClientset(pgObjs...)}
	h.a = New(h.kube, h.pgc, Options{Random: samples.Seeded(7), Log: logrus.NewEntry(log)})
	return h
}

// keyOf is the cluster key of pg, "namespace/name".
func keyOf(pg *v1.Postgresql) string { return pg.Namespace + "/" + pg.Name }

// testCluster is the minimal sample: 2 instances, users zalando and
// foo_user, in namespace db.
func testCluster(t *testing.T) *v1.Postgresql {
	t.Helper()
	return samples.Load(t, "minimal")
}
