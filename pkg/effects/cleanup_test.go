package effects

//lint:file-ignore SA1019 Patroni 3 keeps its state in v1 Endpoints, which EndpointSlices cannot replace: the tests make them as Patroni does.

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
)

func TestCleanup(t *testing.T) {
	// Retain (the default): the volume claims and the credentials Secrets
	// outlive the cluster, the Secrets without their owner reference to it;
	// Delete (spec.volume.retention): both go.
	for _, retention := range []v1.VolumeRetention{"", v1.DeleteVolumes} {
		t.Run("retention="+string(retention), func(t *testing.T) {
			bothModes(t, func(t *testing.T, newHarness harnessFunc) {
				a, b := testCluster(t), otherCluster(t)
				h := newHarness(t, []*v1.Postgresql{a, b})
				for _, pg := range []*v1.Postgresql{a, b} {
					if err := h.ensure(t, pg); err != nil {
						t.Fatal(err)
					}
				}
				ctx := context.Background()
				// Patroni's ConfigMaps of a, b's, and ConfigMaps Patroni did not
				// write: only a's go.
				patroni := func(pg *v1.Postgresql, suffix string) *corev1.ConfigMap {
					return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: pg.Name + "-" + suffix, Namespace: pg.Namespace,
						Labels: cluster.Selector(pg.Name), Annotations: map[string]string{cluster.AnnotationLeader: cluster.PodName(pg.Name, 0)}}}
				}
				var gone, kept []*corev1.ConfigMap
				for _, suffix := range []string{"config", "leader", "failover", "sync"} {
					gone = append(gone, patroni(a, suffix))
					kept = append(kept, patroni(b, suffix))
				}
				unlabelled := patroni(a, "mine")
				unlabelled.Labels = nil
				otherApp := patroni(a, "app")
				otherApp.Labels = map[string]string{cluster.LabelApplication: "other", cluster.LabelClusterName: a.Name}
				otherNS := patroni(a, "leader")
				otherNS.Namespace = "elsewhere"
				kept = append(kept, unlabelled, otherApp, otherNS)
				for _, cm := range slices.Concat(gone, kept) {
					if _, err := h.kube.CoreV1().ConfigMaps(cm.Namespace).Create(ctx, cm, metav1.CreateOptions{FieldManager: someoneElse}); err != nil {
						t.Fatal(err)
					}
				}
				claim := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{
					Name: cluster.PersistentVolumeClaimName(a.Name, 0), Namespace: a.Namespace, Labels: cluster.Labels(a)}}
				running := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: cluster.PodName(a.Name, 0), Namespace: a.Namespace, Labels: cluster.Labels(a)}}
				for _, o := range []runtime.Object{claim, running} {
					if err := h.kube.Tracker().Add(o); err != nil {
						t.Fatal(err)
					}
				}
				dying := deleting(h.pg.get(a.Namespace, a.Name))
				dying.Spec.Volume.Retention = retention
				h.pg.put(dying)
				h.kubeWrites()

				if err := h.cleanup(t, a); err != nil {
					t.Fatal(err)
				}
				for _, w := range h.kubeWrites() {
					if strings.Contains(w, "pgloop-pod") {
						t.Errorf("cleanup of a cluster that is not the last wrote a shared object: %s", w)
					}
				}
				if h.pg.get(a.Namespace, a.Name) != nil {
					t.Error("finalizer not removed: the resource is still there")
				}
				for _, o := range buildAll(t, a).All() {
					kind := o.GetObjectKind().GroupVersionKind().Kind
					gvr := o.GetObjectKind().GroupVersionKind().GroupVersion().WithResource(resourceOf(o))
					_, err := h.kube.Tracker().Get(gvr, o.GetNamespace(), o.GetName())
					switch kind {
					case "ServiceAccount", "Role", "RoleBinding":
						// Still used by b.
						if err != nil {
							t.Errorf("shared %s deleted while another cluster uses it", kind)
						}
					case "Secret":
						if retention == v1.DeleteVolumes {
							if !apierrors.IsNotFound(err) {
								t.Errorf("Secret %s not deleted with retention Delete (%v)", o.GetName(), err)
							}
							continue
						}
						s, err := h.kube.CoreV1().Secrets(o.GetNamespace()).Get(ctx, o.GetName(), metav1.GetOptions{})
						switch {
						case err != nil:
							t.Errorf("Secret %s deleted with retention Retain (%v)", o.GetName(), err)
						case len(s.OwnerReferences) != 0:
							t.Errorf("Secret %s kept with its owner references %v: the garbage collector would delete it", s.Name, s.OwnerReferences)
						}
					default:
						if !apierrors.IsNotFound(err) {
							t.Errorf("%s %s not deleted (%v)", kind, o.GetName(), err)
						}
					}
				}
				for _, cm := range gone {
					if _, err := h.kube.CoreV1().ConfigMaps(cm.Namespace).Get(ctx, cm.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
						t.Errorf("Patroni's configmap %s not deleted (%v)", cm.Name, err)
					}
				}
				for _, cm := range kept {
					if _, err := h.kube.CoreV1().ConfigMaps(cm.Namespace).Get(ctx, cm.Name, metav1.GetOptions{}); err != nil {
						t.Errorf("configmap %s/%s %v deleted: not Patroni's of %s (%v)", cm.Namespace, cm.Name, cm.Labels, a.Name, err)
					}
				}
				if _, err := h.kube.CoreV1().Pods(a.Namespace).Get(ctx, running.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
					t.Errorf("pod %s not deleted", running.Name)
				}
				_, err := h.kube.CoreV1().PersistentVolumeClaims(a.Namespace).Get(ctx, claim.Name, metav1.GetOptions{})
				switch {
				case retention == v1.DeleteVolumes && !apierrors.IsNotFound(err):
					t.Errorf("volume claim kept with retention Delete (%v)", err)
				case retention != v1.DeleteVolumes && err != nil:
					t.Errorf("volume claim deleted with retention Retain (%v)", err)
				}
				// b is untouched.
				h.kubeWrites()
				if err := h.ensure(t, b); err != nil {
					t.Fatal(err)
				}
				if w := h.kubeWrites(); len(w) != 0 {
					t.Errorf("cleanup of a changed b's objects: ensure of b wrote %v", w)
				}

				// The last cluster's cleanup deletes the shared objects.
				h.pg.put(deleting(h.pg.get(b.Namespace, b.Name)))
				if err := h.cleanup(t, b); err != nil {
					t.Fatal(err)
				}
				for _, o := range []cluster.Object{cluster.ServiceAccount(b), cluster.Role(b), cluster.RoleBinding(b)} {
					gvr := o.GetObjectKind().GroupVersionKind().GroupVersion().WithResource(resourceOf(o))
					if _, err := h.kube.Tracker().Get(gvr, o.GetNamespace(), o.GetName()); !apierrors.IsNotFound(err) {
						t.Errorf("shared %s kept after the last cluster (%v)", o.GetObjectKind().GroupVersionKind().Kind, err)
					}
				}
				// A second run finds nothing to do.
				if err := h.cleanup(t, b); err != nil {
					t.Errorf("cleanup of a gone resource: %v", err)
				}
			})
		})
	}
}

func TestCleanupWaitsForPods(t *testing.T) {
	bothModes(t, func(t *testing.T, newHarness harnessFunc) {
		pg := deleting(testCluster(t))
		pg.Finalizers = []string{cluster.Finalizer}
		terminating := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
			Name: cluster.PodName(pg.Name, 0), Namespace: pg.Namespace, Labels: cluster.Labels(pg),
			DeletionTimestamp: &metav1.Time{Time: time.Unix(1700000000, 0)}, Finalizers: []string{"kubelet"}}}
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: cluster.LeaderConfigMapName(pg.Name), Namespace: pg.Namespace,
			Labels: cluster.Selector(pg.Name)}}
		h := newHarness(t, []*v1.Postgresql{pg}, terminating, cm)
		err := h.cleanup(t, pg)
		if !errors.Is(err, ErrPodsTerminating) {
			t.Fatalf("err = %v, want ErrPodsTerminating", err)
		}
		if stored := h.pg.get(pg.Namespace, pg.Name); stored == nil || !slices.Contains(stored.Finalizers, cluster.Finalizer) {
			t.Error("finalizer removed while a pod still runs")
		}
		if _, err := h.kube.CoreV1().ConfigMaps(pg.Namespace).Get(context.Background(), cm.Name, metav1.GetOptions{}); err != nil {
			t.Error("Patroni's configmap deleted while Patroni still runs")
		}
		for _, w := range h.kubeWrites() {
			if strings.HasPrefix(w, "delete pods ") {
				t.Errorf("a terminating pod deleted again: %s", w)
			}
		}
	})
}

func TestCleanupRefusesLiveCluster(t *testing.T) {
	bothModes(t, func(t *testing.T, newHarness harnessFunc) {
		pg := testCluster(t)
		h := newHarness(t, []*v1.Postgresql{pg})
		if err := h.ensure(t, pg); err != nil {
			t.Fatal(err)
		}
		h.kubeWrites()
		if err := h.cleanup(t, pg); err == nil {
			t.Fatal("cleanup of a cluster not being deleted must fail")
		}
		if w := h.kubeWrites(); len(w) != 0 {
			t.Errorf("refused cleanup wrote %v", w)
		}
	})
}

func TestCleanupFinalizerConflict(t *testing.T) {
	bothModes(t, func(t *testing.T, newHarness harnessFunc) {
		pg := deleting(testCluster(t))
		pg.Finalizers = []string{"other", cluster.Finalizer}
		h := newHarness(t, []*v1.Postgresql{pg})
		h.pg.failUpd = func(n int) error {
			if n == 1 {
				return apierrors.NewConflict(v1.Resource(v1.PostgresqlResource), pg.Name, errors.New("modified"))
			}
			return nil
		}
		if err := h.cleanup(t, pg); err != nil {
			t.Fatal(err)
		}
		if got := h.pg.get(pg.Namespace, pg.Name).Finalizers; !slices.Equal(got, []string{"other"}) {
			t.Errorf("finalizers = %v, want [other]", got)
		}
	})
}

// TestDeleteObject: an object already gone is deleted; so is one whose
// name, with a UID as precondition, is another object's (Conflict). A
// Conflict without that precondition is an error.
func TestDeleteObject(t *testing.T) {
	pods := corev1.Resource("pods")
	conflict := apierrors.NewConflict(pods, "p", errors.New("precondition failed"))
	tests := []struct {
		name    string
		uid     string
		err     error
		wantErr bool
	}{
		{name: "deleted"},
		{name: "gone", err: apierrors.NewNotFound(pods, "p")},
		{name: "gone, with a UID", uid: "u1", err: apierrors.NewNotFound(pods, "p")},
		{name: "the name is another object's", uid: "u1", err: conflict},
		{name: "a Conflict without a UID", err: conflict, wantErr: true},
		{name: "any other error", uid: "u1", err: apierrors.NewInternalError(errors.New("etcd")), wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := newHarness(t, nil).eff.run("db/x")
			if err != nil {
				t.Fatal(err)
			}
			var got metav1.DeleteOptions
			del := func(_ context.Context, _ string, opts metav1.DeleteOptions) error {
				got = opts
				return tt.err
			}
			err = r.deleteObject(context.Background(), "pod", "p", del, withUID(tt.uid))
			if (err != nil) != tt.wantErr {
				t.Errorf("error %v, want one: %t", err, tt.wantErr)
			}
			if pre := got.Preconditions; (pre != nil && pre.UID != nil && string(*pre.UID) == tt.uid) != (tt.uid != "") {
				t.Errorf("preconditions %+v, want UID %q", pre, tt.uid)
			}
		})
	}
}

// TestCleanupPatroniEndpoints: the cleanup of a cluster whose Patroni
// keeps its state in Endpoints deletes them as it deletes ConfigMaps, by
// Patroni's labels; that of a cluster on ConfigMaps deletes no Endpoints.
func TestCleanupPatroniEndpoints(t *testing.T) {
	for _, tc := range []struct {
		store   v1.PatroniStore
		deleted bool
	}{
		{v1.PatroniStoreEndpoints, true},
		{v1.PatroniStoreConfigMaps, false},
	} {
		t.Run(string(tc.store), func(t *testing.T) {
			bothModes(t, func(t *testing.T, newHarness harnessFunc) {
				pg := deleting(testCluster(t))
				pg.Annotations = map[string]string{v1.AnnotationPatroniStore: string(tc.store)}
				pg.Finalizers = []string{cluster.Finalizer}
				other := otherCluster(t)
				endpoints := func(pg *v1.Postgresql, name string) *corev1.Endpoints {
					return &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: pg.Namespace, Labels: cluster.Selector(pg.Name)}}
				}
				var patroni []runtime.Object
				for _, name := range []string{pg.Name, pg.Name + "-config", pg.Name + "-failover", pg.Name + "-sync"} {
					patroni = append(patroni, endpoints(pg, name))
				}
				others := endpoints(other, other.Name)
				h := newHarness(t, []*v1.Postgresql{pg, other}, append(patroni, others)...)
				if err := h.cleanup(t, pg); err != nil {
					t.Fatal(err)
				}
				ctx := context.Background()
				for _, o := range patroni {
					name := o.(*corev1.Endpoints).Name
					_, err := h.kube.CoreV1().Endpoints(pg.Namespace).Get(ctx, name, metav1.GetOptions{})
					if gone := apierrors.IsNotFound(err); gone != tc.deleted {
						t.Errorf("endpoints %s deleted: %v, want %v (%v)", name, gone, tc.deleted, err)
					}
				}
				if _, err := h.kube.CoreV1().Endpoints(pg.Namespace).Get(ctx, others.Name, metav1.GetOptions{}); err != nil {
					t.Errorf("another cluster's endpoints %s deleted (%v)", others.Name, err)
				}
			})
		})
	}
}
