package informers

//lint:file-ignore SA1019 Patroni 3 keeps its state in v1 Endpoints, which EndpointSlices cannot replace: the tests make them as Patroni does.

import (
	"context"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
)

// TestHandlers drives the informers through a fake API and checks each
// watch event becomes the right Notify. A case that must notify nothing
// is followed by one that notifies on the same informer: handlers of one
// informer run in order, so had the first notified, its note would come
// first.
func TestHandlers(t *testing.T) {
	c1, c2 := newPG("c1", 1), newPG("c2", 1)
	rec := newRecorder()
	inf, kube, pgc := start(t, Options{}, rec, []*v1.Postgresql{c1, c2})
	got := map[note]int{}
	for range 2 {
		got[rec.next(t)]++
	}
	if got[note{"db/c1", SignalSpec}] != 1 || got[note{"db/c2", SignalSpec}] != 1 {
		t.Fatalf("initial notes %v", got)
	}

	ctx := context.Background()
	sts := statefulSet(c1)
	objs := cluster.Names(c1)
	create := func(obj runtime.Object) func(*testing.T) {
		return func(t *testing.T) { mustDo(t, kube.Tracker().Add(obj)) }
	}
	updatePG := func(name string, mod func(*v1.Postgresql)) func(*testing.T) {
		return func(t *testing.T) {
			cur, err := pgc.PgloopV1().Postgresqls(ns).Get(ctx, name, metav1.GetOptions{})
			mustDo(t, err)
			cur = cur.DeepCopy()
			mod(cur)
			_, err = pgc.PgloopV1().Postgresqls(ns).Update(ctx, cur, metav1.UpdateOptions{})
			mustDo(t, err)
		}
	}
	labelled := func(obj metav1.Object, name string) {
		obj.SetNamespace(ns)
		obj.SetName(name)
		obj.SetLabels(cluster.Labels(c1))
	}
	svc := &corev1.Service{}
	labelled(svc, objs.Services[0])
	secret := &corev1.Secret{Data: map[string][]byte{"password": []byte("s3cr3t")}}
	labelled(secret, objs.Secrets[0])
	pdb := &policyv1.PodDisruptionBudget{}
	labelled(pdb, objs.PodDisruptionBudget)
	poolerDeployment := &appsv1.Deployment{}
	labelled(poolerDeployment, cluster.PoolerName(c1.Name, cluster.RoleMaster))
	poolerDeployment.Labels[cluster.LabelApplication] = cluster.ApplicationPooler
	stranger := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "stranger",
		Labels: map[string]string{cluster.LabelApplication: cluster.ApplicationSpilo}}}
	otherSts := statefulSet(newPG("not-pgloop", 1))

	steps := []struct {
		name string
		do   []func(*testing.T)
		want []note
	}{
		{"pod added", []func(*testing.T){create(pod(c1, 0))}, []note{{"db/c1", SignalPods}}},
		{"pod updated", []func(*testing.T){func(t *testing.T) {
			mustDo(t, kube.Tracker().Update(podsGVR, pod(c1, 0, master), ns))
		}}, []note{{"db/c1", SignalPods}}},
		{"pod relabelled to another cluster notifies both", []func(*testing.T){func(t *testing.T) {
			p := pod(c1, 0)
			p.Labels[cluster.LabelClusterName] = "c2"
			mustDo(t, kube.Tracker().Update(podsGVR, p, ns))
		}}, []note{{"db/c1", SignalPods}, {"db/c2", SignalPods}}},
		{"pod without cluster-name ignored", []func(*testing.T){create(stranger), create(pod(c1, 1))},
			[]note{{"db/c1", SignalPods}}},
		{"pod deleted", []func(*testing.T){func(t *testing.T) {
			mustDo(t, kube.CoreV1().Pods(ns).Delete(ctx, "c1-1", metav1.DeleteOptions{}))
		}}, []note{{"db/c1", SignalPods}}},
		{"statefulset", []func(*testing.T){create(sts)}, []note{{"db/c1", SignalObjects}}},
		{"service", []func(*testing.T){create(svc)}, []note{{"db/c1", SignalObjects}}},
		{"secret", []func(*testing.T){create(secret)}, []note{{"db/c1", SignalObjects}}},
		{"poddisruptionbudget", []func(*testing.T){create(pdb)}, []note{{"db/c1", SignalObjects}}},
		{"connection pooler's deployment", []func(*testing.T){create(poolerDeployment)}, []note{{"db/c1", SignalObjects}}},
		{"persistentvolumeclaim", []func(*testing.T){create(claim(c1, 0, corev1.ClaimPending))}, []note{{"db/c1", SignalObjects}}},
		{"statefulset deleted", []func(*testing.T){func(t *testing.T) {
			mustDo(t, kube.AppsV1().StatefulSets(ns).Delete(ctx, sts.Name, metav1.DeleteOptions{}))
		}}, []note{{"db/c1", SignalObjects}}},
		{"leader record written", []func(*testing.T){create(lock(c1, "c1-0"))}, []note{{"db/c1", SignalLeader}}},
		{"renewals and Patroni's other configmaps not notified", []func(*testing.T){
			func(t *testing.T) {
				renewed := lock(c1, "c1-0")
				renewed.Annotations[cluster.AnnotationRenewTime] = "2030-01-02T03:04:10.000000+00:00"
				renewed.Annotations["optime"] = "67109999"
				mustDo(t, kube.Tracker().Update(configMapsGVR, renewed, ns))
			},
			create(patroniConfigMap(c1, "config")),
			create(patroniConfigMap(c1, "failover")),
			func(t *testing.T) {
				took := lock(c1, "c1-1")
				took.Annotations[cluster.AnnotationTransitions] = "1"
				mustDo(t, kube.Tracker().Update(configMapsGVR, took, ns))
			},
		}, []note{{"db/c1", SignalLeader}}},
		{"leader released", []func(*testing.T){func(t *testing.T) {
			mustDo(t, kube.Tracker().Update(configMapsGVR, lock(c1, ""), ns))
		}}, []note{{"db/c1", SignalLeader}}},
		{"leader record deleted", []func(*testing.T){func(t *testing.T) {
			mustDo(t, kube.CoreV1().ConfigMaps(ns).Delete(ctx, cluster.LeaderConfigMapName(c1.Name), metav1.DeleteOptions{}))
		}}, []note{{"db/c1", SignalLeader}}},
		{"leader record written in Endpoints", []func(*testing.T){create(lockEndpoints(c1, "c1-0"))}, []note{{"db/c1", SignalLeader}}},
		{"renewals in Endpoints, Patroni's other Endpoints and the replica Service's not notified", []func(*testing.T){
			func(t *testing.T) {
				renewed := lockEndpoints(c1, "c1-0")
				renewed.Annotations[cluster.AnnotationRenewTime] = "2030-01-02T03:04:10.000000+00:00"
				renewed.Subsets[0].Addresses[0].IP = "10.0.0.11"
				mustDo(t, kube.Tracker().Update(endpointsGVR, renewed, ns))
			},
			create(patroniEndpoints(c1, "config")),
			create(patroniEndpoints(c1, "failover")),
			create(&corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: cluster.ReplicaServiceName(c1.Name),
				Labels: cluster.RoleSelector(c1.Name, cluster.RoleReplica)}}),
			func(t *testing.T) {
				took := lockEndpoints(c1, "c1-1")
				took.Annotations[cluster.AnnotationTransitions] = "1"
				mustDo(t, kube.Tracker().Update(endpointsGVR, took, ns))
			},
		}, []note{{"db/c1", SignalLeader}}},
		{"leader record in Endpoints deleted", []func(*testing.T){func(t *testing.T) {
			mustDo(t, kube.CoreV1().Endpoints(ns).Delete(ctx, cluster.LeaderEndpointsName(c1.Name), metav1.DeleteOptions{}))
		}}, []note{{"db/c1", SignalLeader}}},
		{"warning event on the cluster's statefulset", []func(*testing.T){
			create(event(sts, "e1", corev1.EventTypeWarning, "FailedCreate", "exceeded quota", 0)),
		}, []note{{"db/c1", SignalEvents}}},
		{"quota of the namespace changed: every cluster of it", []func(*testing.T){
			create(resourceQuota("q", "")),
		}, []note{{"db/c1", SignalQuota}, {"db/c2", SignalQuota}}},
		{"normal event and event of a statefulset not pgloop's ignored", []func(*testing.T){
			create(event(sts, "e2", corev1.EventTypeNormal, "SuccessfulCreate", "create Pod c1-0", 0)),
			create(event(otherSts, "e3", corev1.EventTypeWarning, "FailedCreate", "exceeded quota", 0)),
			create(event(statefulSet(c2), "e4", corev1.EventTypeWarning, "FailedCreate", "exceeded quota", 0)),
		}, []note{{"db/c2", SignalEvents}}},
		{"status-only update not notified", []func(*testing.T){
			updatePG("c1", func(pg *v1.Postgresql) {
				pg.Status.State, pg.Status.Epoch, pg.Status.Message = "Degraded", 9, "pod c1-0: unschedulable"
				pg.ResourceVersion = "77"
				pg.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "pgloop", Subresource: "status"}}
			}),
			updatePG("c2", func(pg *v1.Postgresql) { pg.Labels = map[string]string{"env": "prod"} }),
		}, []note{{"db/c2", urgent(SignalSpec)}}},
		{"spec update", []func(*testing.T){updatePG("c1", func(pg *v1.Postgresql) {
			pg.Spec.NumberOfInstances, pg.Generation = 2, 2
		})}, []note{{"db/c1", urgent(SignalSpec)}}},
		{"annotation update", []func(*testing.T){updatePG("c1", func(pg *v1.Postgresql) {
			pg.Annotations = map[string]string{"note": "x"}
		})}, []note{{"db/c1", urgent(SignalSpec)}}},
		{"deletion requested", []func(*testing.T){updatePG("c1", func(pg *v1.Postgresql) {
			pg.DeletionTimestamp = ptr.To(metav1.Now())
		})}, []note{{"db/c1", urgent(SignalSpec)}}},
		{"cluster deleted", []func(*testing.T){func(t *testing.T) {
			mustDo(t, pgc.PgloopV1().Postgresqls(ns).Delete(ctx, "c1", metav1.DeleteOptions{}))
		}}, []note{{"db/c1", urgent(SignalSpec)}}},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			for _, do := range st.do {
				do(t)
			}
			// Notes of different informers may interleave: compare as sets.
			want := map[note]int{}
			for _, n := range st.want {
				want[n]++
			}
			for range st.want {
				n := rec.next(t)
				if want[n] == 0 {
					t.Fatalf("got %v, want %v", n, st.want)
				}
				want[n]--
			}
		})
	}

	if objs, ok := inf.Objects("db/c1"); ok {
		t.Errorf("db/c1 after deletion: %+v", objs)
	}
	cached, err := inf.all.owned.Core().V1().Secrets().Lister().Secrets(ns).Get(secret.Name)
	if err != nil || cached.Data != nil {
		t.Errorf("cached secret %v, %v: its data must not be kept", cached, err)
	}
	select {
	case n := <-rec.ch:
		t.Errorf("unexpected %v", n)
	default:
	}
}

var (
	podsGVR       = corev1.SchemeGroupVersion.WithResource("pods")
	configMapsGVR = corev1.SchemeGroupVersion.WithResource("configmaps")
	endpointsGVR  = corev1.SchemeGroupVersion.WithResource("endpoints")
)

// patroniEndpoints is one of Patroni's Endpoints of pg on Endpoints other
// than the leader record ("config", "failover", "sync").
func patroniEndpoints(pg *v1.Postgresql, key string) *corev1.Endpoints {
	cm := patroniConfigMap(pg, key)
	return &corev1.Endpoints{ObjectMeta: cm.ObjectMeta}
}

// patroniConfigMap is one of Patroni's ConfigMaps of pg other than the
// leader record ("config", "failover", "sync").
func patroniConfigMap(pg *v1.Postgresql, key string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: pg.Namespace, Name: pg.Name + "-" + key,
		Labels: cluster.Selector(pg.Name), Annotations: map[string]string{"config": `{"ttl":30}`}}}
}

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestTombstones feeds the delete handlers the DeletedFinalStateUnknown a
// relist leaves when a deletion was missed.
func TestTombstones(t *testing.T) {
	c1 := newPG("c1", 1)
	sts := statefulSet(c1)
	rec := newRecorder()
	i := &Informers{notifier: rec, log: logrus.NewEntry(logrus.StandardLogger())}
	s := &scope{
		postgresqls: cache.NewSharedIndexInformer(&cache.ListWatch{}, &v1.Postgresql{}, 0,
			cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}),
		claims: cache.NewSharedIndexInformer(&cache.ListWatch{}, &corev1.PersistentVolumeClaim{}, 0, cache.Indexers{}),
	}
	mustDo(t, s.postgresqls.GetStore().Add(c1))
	mustDo(t, s.claims.GetStore().Add(claim(c1, 0, corev1.ClaimPending)))

	tests := []struct {
		name    string
		handler cache.ResourceEventHandler
		obj     any
		want    *note
	}{
		{"cluster", i.specHandler(), c1, &note{"db/c1", urgent(SignalSpec)}},
		{"cluster tombstone", i.specHandler(), cache.DeletedFinalStateUnknown{Key: "db/c1", Obj: c1}, &note{"db/c1", urgent(SignalSpec)}},
		{"cluster tombstone without object", i.specHandler(), cache.DeletedFinalStateUnknown{Key: "db/c1"}, &note{"db/c1", urgent(SignalSpec)}},
		{"pod tombstone", i.ownedHandler(SignalPods), cache.DeletedFinalStateUnknown{Key: "db/c1-0", Obj: pod(c1, 0)}, &note{"db/c1", SignalPods}},
		{"claim tombstone", i.ownedHandler(SignalObjects), cache.DeletedFinalStateUnknown{Key: "db/pgdata-c1-0", Obj: claim(c1, 0, corev1.ClaimBound)}, &note{"db/c1", SignalObjects}},
		{"tombstone without object", i.ownedHandler(SignalObjects), cache.DeletedFinalStateUnknown{Key: "db/x"}, nil},
		{"event tombstone", i.eventHandler(s, "StatefulSet"), cache.DeletedFinalStateUnknown{Key: "db/e1",
			Obj: event(sts, "e1", corev1.EventTypeWarning, "FailedCreate", "exceeded quota", 0)}, &note{"db/c1", SignalEvents}},
		{"event tombstone without object", i.eventHandler(s, "StatefulSet"), cache.DeletedFinalStateUnknown{Key: "db/e1"}, nil},
		{"claim event tombstone", i.eventHandler(s, "PersistentVolumeClaim"), cache.DeletedFinalStateUnknown{Key: "db/e2",
			Obj: claimEvent(c1, 0, "ProvisioningFailed", "not found")}, &note{"db/c1", SignalEvents}},
		{"claim event of a claim not cached", i.eventHandler(s, "PersistentVolumeClaim"), claimEvent(c1, 3, "ProvisioningFailed", "not found"), nil},
		{"statefulset event on the claims' handler", i.eventHandler(s, "PersistentVolumeClaim"),
			event(sts, "e1", corev1.EventTypeWarning, "FailedCreate", "exceeded quota", 0), nil},
		{"quota tombstone", i.quotaHandler(s), cache.DeletedFinalStateUnknown{Key: "db/q", Obj: resourceQuota("q", "1")}, &note{"db/c1", SignalQuota}},
		{"leader record tombstone", i.leaderHandler(cluster.LeaderConfigMapName), cache.DeletedFinalStateUnknown{Key: "db/c1-leader", Obj: lock(c1, "c1-0")}, &note{"db/c1", SignalLeader}},
		{"other configmap tombstone", i.leaderHandler(cluster.LeaderConfigMapName), cache.DeletedFinalStateUnknown{Key: "db/c1-config", Obj: patroniConfigMap(c1, "config")}, nil},
		{"leader record tombstone without object", i.leaderHandler(cluster.LeaderConfigMapName), cache.DeletedFinalStateUnknown{Key: "db/c1-leader"}, nil},
		{"leader record in Endpoints tombstone", i.leaderHandler(cluster.LeaderEndpointsName), cache.DeletedFinalStateUnknown{Key: "db/c1", Obj: lockEndpoints(c1, "c1-0")}, &note{"db/c1", SignalLeader}},
		{"other endpoints tombstone", i.leaderHandler(cluster.LeaderEndpointsName), cache.DeletedFinalStateUnknown{Key: "db/c1-config", Obj: patroniEndpoints(c1, "config")}, nil},
		{"leader configmap on the endpoints' handler", i.leaderHandler(cluster.LeaderEndpointsName), lock(c1, "c1-0"), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.handler.OnDelete(tt.obj)
			select {
			case n := <-rec.ch:
				if tt.want == nil || n != *tt.want {
					t.Errorf("got %v, want %v", n, tt.want)
				}
			default:
				if tt.want != nil {
					t.Errorf("nothing, want %v", *tt.want)
				}
			}
		})
	}
}

// A user's action on a Postgresql is urgent; its initial listing and a
// resync (the cached object as both old and new) are not.
func TestSpecHandlerUrgency(t *testing.T) {
	c1 := newPG("c1", 1)
	c2 := c1.DeepCopy()
	c2.Generation = 2
	rec := newRecorder()
	i := &Informers{notifier: rec, log: logrus.NewEntry(logrus.StandardLogger())}
	h := i.specHandler()
	for _, tt := range []struct {
		name string
		do   func()
		want string
	}{
		{"initial list", func() { h.OnAdd(c1, true) }, SignalSpec},
		{"created", func() { h.OnAdd(c1, false) }, urgent(SignalSpec)},
		{"resync", func() { h.OnUpdate(c1, c1) }, SignalSpec},
		{"spec changed", func() { h.OnUpdate(c1, c2) }, urgent(SignalSpec)},
		{"deleted", func() { h.OnDelete(c2) }, urgent(SignalSpec)},
	} {
		tt.do()
		if n := rec.next(t); n != (note{"db/c1", tt.want}) {
			t.Errorf("%s: got %v, want %v", tt.name, n, note{"db/c1", tt.want})
		}
	}
}

func TestSpecChanged(t *testing.T) {
	base := newPG("c1", 1)
	base.ResourceVersion = "1"
	base.Labels = map[string]string{"a": "1"}
	base.Finalizers = []string{"pgloop.dev/cleanup"}
	tests := []struct {
		name string
		mod  func(*v1.Postgresql)
		want bool
	}{
		{"status", func(p *v1.Postgresql) { p.Status.State, p.Status.Epoch = "Degraded", 5 }, false},
		{"resourceVersion", func(p *v1.Postgresql) { p.ResourceVersion = "2" }, false},
		{"managedFields", func(p *v1.Postgresql) { p.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "pgloop"}} }, false},
		{"generation", func(p *v1.Postgresql) { p.Generation++ }, true},
		{"deletionTimestamp", func(p *v1.Postgresql) { p.DeletionTimestamp = ptr.To(metav1.Now()) }, true},
		{"finalizers", func(p *v1.Postgresql) { p.Finalizers = nil }, true},
		{"labels", func(p *v1.Postgresql) { p.Labels["a"] = "2" }, true},
		{"annotations", func(p *v1.Postgresql) { p.Annotations = map[string]string{"x": "y"} }, true},
		{"uid (recreated)", func(p *v1.Postgresql) { p.UID = "other" }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cur := base.DeepCopy()
			tt.mod(cur)
			if got := SpecChanged(base, cur); got != tt.want {
				t.Errorf("SpecChanged = %v, want %v", got, tt.want)
			}
		})
	}
	if !SpecChanged(base, base) {
		t.Error("a resync (same object) must notify")
	}
}

// TestSelectors checks what the informers ask the API server for: pgloop's
// label on owned objects, Warning Events of StatefulSets only, one namespace
// each.
func TestSelectors(t *testing.T) {
	kube := fake.NewClientset()
	inf := New(kube, newPGClient(), Options{Namespaces: []string{"db"}}, discard{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	inf.Start(ctx)
	mustDo(t, inf.WaitForCacheSync(ctx))
	seen := map[string]bool{}
	for _, a := range kube.Actions() {
		la, ok := a.(k8stesting.ListAction)
		if !ok {
			continue
		}
		lr := la.GetListRestrictions()
		res := a.GetResource().Resource
		seen[res] = true
		if res == "storageclasses" {
			// Cluster-scoped, all of them: whether a class allows
			// volume expansion.
			if a.GetNamespace() != "" || lr.Labels.String() != "" {
				t.Errorf("storageclasses listed in namespace %q with label selector %q", a.GetNamespace(), lr.Labels.String())
			}
			continue
		}
		if a.GetNamespace() != "db" {
			t.Errorf("%s listed in namespace %q", res, a.GetNamespace())
		}
		switch res {
		case "events":
			if got := lr.Fields.String(); got != "involvedObject.kind=StatefulSet,type=Warning" &&
				got != "involvedObject.kind=PersistentVolumeClaim,type=Warning" {
				t.Errorf("events field selector %q", got)
			}
		case "resourcequotas":
			// Every quota of the namespace: none is pgloop's.
			if got := lr.Labels.String(); got != "" {
				t.Errorf("resourcequotas label selector %q", got)
			}
		case "deployments":
			if got := lr.Labels.String(); got != "application=db-connection-pooler" {
				t.Errorf("%s label selector %q", res, got)
			}
		default:
			if got := lr.Labels.String(); got != "application=spilo" && !(got == "application=db-connection-pooler" &&
				(res == "services" || res == "poddisruptionbudgets" || res == "pods")) {
				t.Errorf("%s label selector %q", res, got)
			}
		}
	}
	for _, res := range []string{"pods", "statefulsets", "services", "secrets", "poddisruptionbudgets", "persistentvolumeclaims", "configmaps", "events", "resourcequotas", "storageclasses", "deployments", "cronjobs"} {
		if !seen[res] {
			t.Errorf("%s never listed", res)
		}
	}

	cancel()
	ctx2, cancel2 := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel2()
	stalled := New(fake.NewClientset(), newPGClient(), Options{}, discard{})
	if err := stalled.WaitForCacheSync(ctx2); err == nil {
		t.Error("WaitForCacheSync of informers never started returned nil")
	}
}

// A StorageClass that changes notifies the clusters with a claim of that
// class, once each, and no other: whether it allows expansion decides
// whether their claims can grow. A resync, the same version again, does not.
func TestClassHandler(t *testing.T) {
	c1, c2, c3 := newPG("c1", 2), newPG("c2", 1), newPG("c3", 1)
	fixed, other := "fixed", "other"
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: fixed, ResourceVersion: "1"}}
	withClass := func(class string) func(*corev1.PersistentVolumeClaim) {
		return func(c *corev1.PersistentVolumeClaim) { c.Spec.StorageClassName = &class }
	}
	rec := newRecorder()
	inf, _, _ := start(t, Options{}, rec, []*v1.Postgresql{c1, c2, c3}, sc,
		claim(c1, 0, corev1.ClaimBound, withClass(fixed)), claim(c1, 1, corev1.ClaimBound, withClass(fixed)),
		claim(c2, 0, corev1.ClaimBound, withClass(other)), claim(c3, 0, corev1.ClaimBound))
	drain := func() {
		for {
			select {
			case <-rec.ch:
			case <-time.After(200 * time.Millisecond):
				return
			}
		}
	}
	drain() // the initial lists
	if got, ok := inf.StorageClass(fixed); !ok || got.Name != fixed {
		t.Fatalf("StorageClass(%q) = %v, %t", fixed, got, ok)
	}

	h := inf.classHandler()
	changed := sc.DeepCopy()
	changed.ResourceVersion, changed.AllowVolumeExpansion = "2", ptr.To(true)
	h.OnUpdate(sc, sc)
	h.OnUpdate(sc, changed)
	if n := rec.next(t); n != (note{ns + "/c1", SignalObjects}) {
		t.Errorf("note %v, want db/c1 %s", n, SignalObjects)
	}
	// The handler notifies on the caller's goroutine: every note it made
	// is in the channel already.
	select {
	case n := <-rec.ch:
		t.Errorf("another note %v: c1 once (two claims), not c2 (another class), not c3 (none), not for the resync", n)
	default:
	}
}
