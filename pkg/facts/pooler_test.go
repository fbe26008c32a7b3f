package facts

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
)

// poolerDeployment returns the Deployment of pg's pooler of role as the
// apiserver holds it once the Deployment controller has seen it, with
// ready of its pods available.
func poolerDeployment(pg *v1.Postgresql, role string, ready int32) *appsv1.Deployment {
	d := cluster.PoolerDeployment(pg, role, cluster.Options{})
	d.UID = types.UID(d.Name + "-uid")
	d.Generation = 1
	want := ptr.Deref(d.Spec.Replicas, 1)
	d.Status = appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: want, UpdatedReplicas: want, ReadyReplicas: ready, AvailableReplicas: ready}
	return d
}

// TestPoolerFacts checks what the facts say of the connection poolers of
// a cluster that is otherwise converged: whether their Deployments are
// the spec's (ObjectsCurrent) and whether their pods run (Pooler).
func TestPoolerFacts(t *testing.T) {
	plain := newPG("c1", 2)
	enabled := newPG("c1", 2)
	enabled.Spec.EnableConnectionPooler = ptr.To(true)
	both := enabled.DeepCopy()
	both.Spec.EnableReplicaConnectionPooler = ptr.To(true)
	session := enabled.DeepCopy()
	session.Generation = 2
	session.Spec.ConnectionPooler = &v1.ConnectionPooler{Mode: "session"}
	// healthy is the StatefulSet, the leader record and two Ready pods,
	// c1-0 the primary, with the Deployments deps.
	healthy := func(pg *v1.Postgresql, deps ...*appsv1.Deployment) []runtime.Object {
		objs := []runtime.Object{statefulSet(pg), lock(pg, "c1-0"), pod(pg, 0, master), pod(pg, 1)}
		for _, d := range deps {
			objs = append(objs, d)
		}
		return objs
	}
	foreign := func(d *appsv1.Deployment) *appsv1.Deployment {
		d = d.DeepCopy()
		d.OwnerReferences = []metav1.OwnerReference{{APIVersion: v1.SchemeGroupVersion.String(), Kind: v1.PostgresqlKind,
			Name: "c1-pooler", UID: "other-uid", Controller: ptr.To(true)}}
		return d
	}
	going := func(d *appsv1.Deployment) *appsv1.Deployment {
		d = d.DeepCopy()
		d.DeletionTimestamp = ptr.To(ago(0))
		return d
	}

	tests := []struct {
		name    string
		pg      *v1.Postgresql
		objs    []runtime.Object
		current bool
		pooler  string
	}{
		{"no pooler", plain, healthy(plain), true, ""},
		{"enabled, the Deployment missing", enabled, healthy(enabled), false, ""},
		{"enabled, not ready", enabled, healthy(enabled, poolerDeployment(enabled, cluster.RoleMaster, 1)),
			true, "connection pooler c1-pooler: 1 of 2 pods ready"},
		{"enabled, ready", enabled, healthy(enabled, poolerDeployment(enabled, cluster.RoleMaster, 2)), true, ""},
		{"both enabled, the replica's missing", both, healthy(both, poolerDeployment(both, cluster.RoleMaster, 2)), false, ""},
		{"both enabled, the replica's not ready", both,
			healthy(both, poolerDeployment(both, cluster.RoleMaster, 2), poolerDeployment(both, cluster.RoleReplica, 0)),
			true, "connection pooler c1-pooler-repl: 0 of 2 pods ready"},
		{"both enabled and ready", both,
			healthy(both, poolerDeployment(both, cluster.RoleMaster, 2), poolerDeployment(both, cluster.RoleReplica, 2)), true, ""},
		{"the mode changed: the Deployment is not the spec's", session,
			healthy(session, poolerDeployment(enabled, cluster.RoleMaster, 2)), false, ""},
		{"disabled, the cluster's Deployment still there", plain,
			healthy(plain, poolerDeployment(enabled, cluster.RoleMaster, 2)), false, ""},
		{"disabled, the replica's still there", enabled,
			healthy(enabled, poolerDeployment(enabled, cluster.RoleMaster, 2), poolerDeployment(both, cluster.RoleReplica, 2)), false, ""},
		{"disabled, a Deployment of that name controlled by another", plain,
			healthy(plain, foreign(poolerDeployment(enabled, cluster.RoleMaster, 2))), true, ""},
		{"disabled, the cluster's Deployment going", plain,
			healthy(plain, going(poolerDeployment(enabled, cluster.RoleMaster, 2))), true, ""},
		{"enabled, the name taken by another's", enabled,
			healthy(enabled, foreign(poolerDeployment(enabled, cluster.RoleMaster, 2))), false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := NewDeriver(cluster.Options{}, true).Facts(objects(tt.pg, tt.objs...), now)
			if f.SpecError != "" || f.Primary != "c1-0" || f.Ready != 2 {
				t.Fatalf("not a converged cluster: %+v", f)
			}
			if f.ObjectsCurrent != tt.current || f.Pooler != tt.pooler {
				t.Errorf("ObjectsCurrent %v Pooler %q, want %v %q", f.ObjectsCurrent, f.Pooler, tt.current, tt.pooler)
			}
		})
	}
}

// TestPoolerDesiredWithBuildOptions checks that the desired Deployment is
// built with the Deriver's options, as the StatefulSet is.
func TestPoolerDesiredWithBuildOptions(t *testing.T) {
	build := cluster.Options{PoolerImage: "registry.example/pgbouncer:custom"}
	pg := newPG("c1", 2)
	pg.Spec.EnableConnectionPooler = ptr.To(true)
	d := cluster.PoolerDeployment(pg, cluster.RoleMaster, build)
	d.Generation, d.Status = 1, appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 2, UpdatedReplicas: 2, AvailableReplicas: 2}
	objs := objects(pg, statefulSet(pg), lock(pg, "c1-0"), pod(pg, 0, master), pod(pg, 1), d)
	if f := NewDeriver(build, true).Facts(objs, now); !f.ObjectsCurrent || f.Pooler != "" {
		t.Errorf("built with the effects' options: %+v", f)
	}
	if f := NewDeriver(cluster.Options{}, true).Facts(objs, now); f.ObjectsCurrent {
		t.Errorf("built with other options than the effects': current")
	}
}

// TestPoolerSync checks that the pooler's role is part of the sync: its
// Secret is one the sync waits for, and enabling a pooler is a new sync.
func TestPoolerSync(t *testing.T) {
	plain := newPG("c1", 2)
	plain.Spec.Users = map[string]v1.UserFlags{"app": {}}
	enabled := plain.DeepCopy()
	enabled.Spec.EnableConnectionPooler = ptr.To(true)
	base := []runtime.Object{statefulSet(plain), lock(plain, "c1-0"), pod(plain, 0, master), pod(plain, 1)}

	without := NewDeriver(cluster.Options{}, true).Facts(objects(plain, append(base, credentials(plain, "1")...)...), now)
	if without.Sync.Hash == "" || without.Sync.Missing {
		t.Fatalf("without a pooler, every Secret there: %+v", without.Sync)
	}
	poolerSecret := cluster.SecretName(v1.DefaultPoolerUser, enabled.Name)
	// The Secrets without the pooler's: Missing, no hash.
	f := NewDeriver(cluster.Options{}, true).Facts(objects(enabled, append(base, credentials(plain, "1")...)...), now)
	if !f.Sync.Missing || f.Sync.Hash != "" {
		t.Errorf("the pooler's Secret %s absent: sync %+v, want Missing", poolerSecret, f.Sync)
	}
	all := credentials(enabled, "1")
	if last := all[len(all)-1].(*corev1.Secret).Name; last != poolerSecret {
		t.Fatalf("the last Secret is %s, want the pooler's %s", last, poolerSecret)
	}
	with := NewDeriver(cluster.Options{}, true).Facts(objects(enabled, append(base, all...)...), now)
	if with.Sync.Missing || with.Sync.Hash == "" || with.Sync.Hash == without.Sync.Hash || with.Sync.Bootstrap {
		t.Errorf("a pooler enabled: sync %+v, want a new hash (without: %+v)", with.Sync, without.Sync)
	}
	// Another pooler user is another sync.
	other := enabled.DeepCopy()
	other.Spec.ConnectionPooler = &v1.ConnectionPooler{User: "bouncer"}
	o := NewDeriver(cluster.Options{}, true).Facts(objects(other, append(base, credentials(other, "1")...)...), now)
	if o.Sync.Hash == "" || o.Sync.Hash == with.Sync.Hash {
		t.Errorf("another pooler user: sync %+v, want another hash than %s", o.Sync, with.Sync.Hash)
	}
	// A pooler alone, no users nor databases: not Patroni's bootstrap,
	// the role is pgloop's to make.
	bare := newPG("c1", 2)
	bare.Spec.Users, bare.Spec.Databases = nil, nil
	bare.Spec.EnableReplicaConnectionPooler = ptr.To(true)
	if b := NewDeriver(cluster.Options{}, true).Facts(objects(bare, append(base, credentials(bare, "1")...)...), now); b.Sync.Bootstrap || b.Sync.Hash == "" {
		t.Errorf("a pooler alone: sync %+v, want no bootstrap", b.Sync)
	}
}
