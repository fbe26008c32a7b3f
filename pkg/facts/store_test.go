package facts

//lint:file-ignore SA1019 Patroni 3 keeps its state in v1 Endpoints, which EndpointSlices cannot replace: the tests make them as Patroni does.

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
)

// onStore returns a copy of pg whose annotation names store.
func onStore(pg *v1.Postgresql, store v1.PatroniStore) *v1.Postgresql {
	out := pg.DeepCopy()
	out.Annotations = map[string]string{v1.AnnotationPatroniStore: string(store)}
	return out
}

// TestPatroniStoreFacts: the primary comes from the leader record of the
// store the cluster's Patroni keeps its state in, and a cluster whose
// annotation names another store than its StatefulSet runs is Invalid.
func TestPatroniStoreFacts(t *testing.T) {
	onMaps := newPG("c1", 2)
	onEndpoints := onStore(onMaps, v1.PatroniStoreEndpoints)
	// pods are two Ready pods of pg, c1-0 labelled master.
	pods := func(pg *v1.Postgresql) []runtime.Object {
		return []runtime.Object{pod(pg, 0, master), pod(pg, 1)}
	}
	// The endpoints controller's Endpoints of a master Service with a
	// selector: labelled as the Service, no leader annotation.
	controllers := &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "c1",
		Labels: cluster.RoleSelector("c1", cluster.RoleMaster)}}
	notOurs := statefulSet(onMaps)
	notOurs.OwnerReferences = nil
	const changed = "metadata.annotations[pgloop.dev/patroni-store]: the pods run Patroni on "

	for _, tc := range []struct {
		name      string
		pg        *v1.Postgresql
		objs      []runtime.Object
		primary   string
		noPrimary string
		specError string // a prefix; "" for none
	}{
		{name: "configmaps: the ConfigMap's holder", pg: onMaps,
			objs: append(pods(onMaps), statefulSet(onMaps), lock(onMaps, "c1-0")), primary: "c1-0"},
		{name: "configmaps: an Endpoints lock is not read", pg: onMaps,
			objs:      append(pods(onMaps), statefulSet(onMaps), lockEndpoints(onMaps, "c1-0")),
			noPrimary: "Patroni has not written its leader record c1-leader yet"},
		{name: "endpoints: the Endpoints' holder", pg: onEndpoints,
			objs: append(pods(onEndpoints), statefulSet(onEndpoints), lockEndpoints(onEndpoints, "c1-0")), primary: "c1-0"},
		{name: "endpoints: a ConfigMap lock is not read", pg: onEndpoints,
			objs:      append(pods(onEndpoints), statefulSet(onEndpoints), lock(onEndpoints, "c1-0")),
			noPrimary: "Patroni has not written its leader record Endpoints c1 yet"},
		{name: "endpoints: the Endpoints without a holder", pg: onEndpoints,
			objs:      append(pods(onEndpoints), statefulSet(onEndpoints), controllers),
			noPrimary: "no member holds Patroni's leader lock (Endpoints c1)"},
		{name: "endpoints: another cluster's Endpoints of the name", pg: onEndpoints,
			objs: append(pods(onEndpoints), statefulSet(onEndpoints), func() *corev1.Endpoints {
				ep := lockEndpoints(onEndpoints, "c1-0")
				ep.Labels = cluster.Selector("other")
				return ep
			}()),
			noPrimary: "Patroni has not written its leader record Endpoints c1 yet"},
		{name: "annotation endpoints on a cluster that runs configmaps", pg: onEndpoints,
			objs:      append(pods(onMaps), statefulSet(onMaps), lock(onMaps, "c1-0")),
			specError: changed + "configmaps, the annotation asks for endpoints (unset means configmaps)"},
		{name: "annotation removed from a cluster that runs endpoints", pg: onMaps,
			objs:      append(pods(onEndpoints), statefulSet(onEndpoints), lockEndpoints(onEndpoints, "c1-0")),
			specError: changed + "endpoints, the annotation asks for configmaps"},
		{name: "a StatefulSet that is not the cluster's yet (an adoption) is no change", pg: onEndpoints,
			objs:      append(pods(onMaps), notOurs),
			noPrimary: "Patroni has not written its leader record Endpoints c1 yet"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := NewDeriver(cluster.Options{}, false).Facts(objects(tc.pg, tc.objs...), now)
			if f.Primary != tc.primary || (tc.noPrimary != "" && f.NoPrimary != tc.noPrimary) {
				t.Errorf("primary %q (%q), want %q (%q)", f.Primary, f.NoPrimary, tc.primary, tc.noPrimary)
			}
			switch {
			case tc.specError == "" && f.SpecError != "":
				t.Errorf("spec error %q, want none", f.SpecError)
			case tc.specError != "" && (len(f.SpecError) < len(tc.specError) || f.SpecError[:len(tc.specError)] != tc.specError):
				t.Errorf("spec error %q, want %q...", f.SpecError, tc.specError)
			}
		})
	}
}

// TestPatroniStoreMemo: the adoption writes the annotation without a new
// generation; the desired StatefulSet the facts compare with, and the one
// they hand the effects, follow it.
func TestPatroniStoreMemo(t *testing.T) {
	before := newPG("c1", 1)
	after := onStore(before, v1.PatroniStoreEndpoints)
	// zalando's StatefulSet, before its controller reference is added:
	// the template of an Endpoints cluster.
	sts := statefulSet(after)
	zalando := sts.DeepCopy()
	zalando.OwnerReferences = nil
	d := NewDeriver(cluster.Options{}, false)
	f := d.Facts(objects(before, zalando, pod(after, 0, master)), now)
	if f.SpecError != "" || f.ObjectsCurrent {
		t.Fatalf("before the annotation: spec error %q, objects current %v; want the ConfigMaps template desired", f.SpecError, f.ObjectsCurrent)
	}
	f = d.Facts(objects(after, sts, lockEndpoints(after, "c1-0"), pod(after, 0, master)), now)
	if f.SpecError != "" || !f.ObjectsCurrent || f.Outdated != 0 || f.Primary != "c1-0" {
		t.Errorf("after the annotation: spec error %q, objects current %v, outdated %d, primary %q; want the Endpoints cluster current",
			f.SpecError, f.ObjectsCurrent, f.Outdated, f.Primary)
	}
	summary, ok := d.KnownStatefulSet(after)
	if !ok || cluster.CompareSummary(sts, summary) != cluster.NoChange {
		t.Errorf("KnownStatefulSet %v: the desired StatefulSet is not the Endpoints one", ok)
	}
	if _, ok := d.KnownStatefulSet(before); ok {
		t.Error("KnownStatefulSet of the resource without the annotation: the memo of the other store")
	}
}
