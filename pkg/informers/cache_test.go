package informers

import (
	"context"
	"io"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/effects"
)

// The informers are the effects' cache.
var _ effects.Cache = (*Informers)(nil)

// The informers are the effects' cache: a new cluster costs its creates
// (and the finalizer, and the growth of a claim), and once the caches have
// seen them, a resync costs no API call at all.
func TestInformersAreTheEffectsCache(t *testing.T) {
	pg := newPG("acid", 2)
	pg.Status = v1.PostgresqlStatus{}
	small := claim(pg, 0, corev1.ClaimBound)
	small.Spec.Resources.Requests = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}
	inf, kube, pgc := start(t, Options{}, discard{}, []*v1.Postgresql{pg}, small)
	// pgCalls counts the effects' calls of the resource client: gets,
	// updates and patches, not the informer's lists and watches.
	var pgCalls atomic.Int64
	pgc.PrependReactor("*", v1.PostgresqlResource, func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetVerb() == "get" || a.GetVerb() == "update" || a.GetVerb() == "patch" {
			pgCalls.Add(1)
		}
		return false, nil, nil
	})
	log := logrus.New()
	log.SetOutput(io.Discard)
	eff := effects.New(kube, pgc, record.NewFakeRecorder(8), effects.Options{
		Cache: inf, Log: logrus.NewEntry(log)})
	key := pg.Namespace + "/" + pg.Name
	ensure := func() {
		t.Helper()
		if err := eff.WriteStatus(context.Background(), key, &v1.PostgresqlStatus{}); err != nil {
			t.Fatalf("status: %v", err)
		}
		if err := eff.Ensure(context.Background(), key, effects.EnsureOptions{}); err != nil {
			t.Fatalf("ensure: %v", err)
		}
	}
	// calls are the effects' calls: not the informers' lists and watches,
	// which select on application only, or on an Event's fields.
	calls := func() []string {
		var out []string
		for _, a := range kube.Actions() {
			switch a := a.(type) {
			case k8stesting.WatchAction:
				continue
			case k8stesting.ListAction:
				if !strings.Contains(a.GetListRestrictions().Labels.String(), cluster.LabelClusterName) {
					continue
				}
			}
			out = append(out, a.GetVerb()+" "+a.GetResource().Resource)
		}
		kube.ClearActions()
		return out
	}

	calls()
	ensure()
	for _, c := range calls() {
		if c != "patch persistentvolumeclaims" && !strings.HasPrefix(c, "create ") {
			t.Errorf("first ensure: %s; want creates and the claim's patch only", c)
		}
	}
	if n := pgCalls.Load(); n != 1 {
		t.Errorf("first ensure: %d calls of the resource client, want 1 (the finalizer)", n)
	}

	// Wait for the caches to see what was written.
	objs, err := cluster.Build(pg, cluster.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !cached(inf, key, objs) {
		if time.Now().After(deadline) {
			t.Fatal("the caches did not see the objects within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, s := range objs.Secrets {
		if got, _ := inf.Secret(s.Namespace, s.Name); got.Data != nil {
			t.Errorf("secret %s cached with its data", s.Name)
		}
	}

	pgCalls.Store(0)
	ensure()
	if c := calls(); len(c) != 0 {
		t.Errorf("resync: %d API calls %v, want none", len(c), c)
	}
	if n := pgCalls.Load(); n != 0 {
		t.Errorf("resync: %d calls of the resource client, want none", n)
	}
}

// cached tells whether the informers' caches hold the resource with its
// finalizer, every object of objs pgloop's informers watch, and the grown
// claim.
func cached(inf *Informers, key string, objs *cluster.Objects) bool {
	pg, ok := inf.Postgresql(key)
	if !ok || !slices.Contains(pg.Finalizers, cluster.Finalizer) {
		return false
	}
	if _, ok := inf.StatefulSet(objs.StatefulSet.Namespace, objs.StatefulSet.Name); !ok {
		return false
	}
	for _, s := range objs.Services {
		if _, ok := inf.Service(s.Namespace, s.Name); !ok {
			return false
		}
	}
	for _, s := range objs.Secrets {
		if _, ok := inf.Secret(s.Namespace, s.Name); !ok {
			return false
		}
	}
	pdb := objs.PodDisruptionBudget
	if _, ok := inf.PodDisruptionBudget(pdb.Namespace, pdb.Name); !ok {
		return false
	}
	claims := inf.PersistentVolumeClaims(key)
	if len(claims) != 1 {
		return false
	}
	size := claims[0].Spec.Resources.Requests[corev1.ResourceStorage]
	return size.Cmp(pg.Spec.Volume.Size) == 0
}

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
