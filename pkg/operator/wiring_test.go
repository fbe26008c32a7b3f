package operator

import (
	"context"
	"io"
	"reflect"
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
	"github.com/pgloop/pgloop/pkg/controller"
	"github.com/pgloop/pgloop/pkg/effects"
	"github.com/pgloop/pgloop/pkg/eventloop"
	"github.com/pgloop/pgloop/pkg/facts"
	"github.com/pgloop/pgloop/pkg/fsm"
	"github.com/pgloop/pgloop/pkg/informers"
	"github.com/pgloop/pgloop/pkg/internal/fixtures"
)

// The wiring: the informers are what the facts are read from and the
// effects' cache, the facts' Observer is the controller's, and the loop is
// the informers' Notifier. pkg/informers knows none of these packages.
var (
	_ facts.Reader        = (*informers.Informers)(nil)
	_ effects.Cache       = (*informers.Informers)(nil)
	_ controller.Observer = (*facts.Observer)(nil)
	_ informers.Notifier  = (*eventloop.Loop)(nil)
)

// The informers are the effects' cache: a new cluster costs its creates
// (and the finalizer, and the growth of a claim), and once the caches have
// seen them, a resync costs no API call at all.
func TestInformersAreTheEffectsCache(t *testing.T) {
	pg := fixtures.NewPG("acid", 2)
	pg.Status = v1.PostgresqlStatus{}
	small := fixtures.Claim(pg, 0, corev1.ClaimBound)
	small.Spec.Resources.Requests = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}
	inf, kube, pgc := startInformers(t, []*v1.Postgresql{pg}, small)
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
	deadline := time.Now().Add(time.Minute)
	for !cached(inf, key, objs) {
		if time.Now().After(deadline) {
			t.Fatal("the caches did not see the objects within a minute")
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
func cached(inf *informers.Informers, key string, objs *cluster.Objects) bool {
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

// TestObserveThroughTheCaches checks the wiring of the operator: facts
// derived from what the caches hold.
func TestObserveThroughTheCaches(t *testing.T) {
	pg := fixtures.NewPG("c1", 3)
	inf, _, _ := startInformers(t, []*v1.Postgresql{pg}, fixtures.StatefulSet(pg), fixtures.Lock(pg, "c1-0"),
		fixtures.Pod(pg, 0, fixtures.Master), fixtures.Pod(pg, 1), fixtures.Pod(pg, 2))
	obs := facts.NewObserver(inf, facts.NewDeriver(cluster.Options{}, true), func() time.Time { return fixtures.Now })
	f, status := obs.Observe("db/c1")
	// The roles' Secrets are not in the caches: the sync is not known yet.
	// The StatefulSet bootstraps the spec's configuration.
	if f.Sync.Hash != "" || !f.Config.Bootstrap || f.Config.Hash == "" {
		t.Errorf("in-database facts: sync %+v config %+v", f.Sync, f.Config)
	}
	f.Sync, f.Config, f.Users, f.Databases, f.NoTarget = fsm.Want{}, fsm.Want{}, nil, nil, ""
	if want := (fsm.Facts{Generation: 1, Desired: 3, Ready: 3, Primary: "c1-0", ObjectsCurrent: true, VolumeSize: "10Gi",
		LoopWait: 10 * time.Second}); !reflect.DeepEqual(f, want) {
		t.Errorf("facts\n got %+v\nwant %+v", f, want)
	}
	if cached, _ := inf.Postgresql("db/c1"); status != &cached.Status {
		t.Errorf("status is not the cache's: %p, want %p", status, &cached.Status)
	}
	if f, status := obs.Observe("db/nope"); !f.Gone || status != nil {
		t.Errorf("db/nope: %+v %v, want gone", f, status)
	}
}
