package facts

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/fsm"
	"github.com/pgloop/pgloop/pkg/patroni"
)

// memberData sets the Patroni member data of a pod, as Patroni's
// Kubernetes store writes it.
func memberData(role string, lsn int64, pending bool) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		m := map[string]any{
			"conn_url": "postgres://127.64.1.2:5432/postgres", "api_url": "http://127.64.1.2:8008/patroni",
			"state": "running", "role": role, "version": "3.0.2", "xlog_location": lsn, "timeline": 1,
		}
		if pending {
			m["pending_restart"] = true
		}
		b, _ := json.Marshal(m)
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[patroni.StatusAnnotation] = string(b)
	}
}

func credentials(pg *v1.Postgresql, rv string) []runtime.Object {
	var out []runtime.Object
	for _, name := range cluster.Names(pg).Secrets {
		out = append(out, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: pg.Namespace, Name: name,
			UID: types.UID("uid-" + name), ResourceVersion: rv}})
	}
	return out
}

// TestInDatabase checks what the facts say of the work inside PostgreSQL
// and Patroni: what the spec asks (by hash), where to send it, the members
// pending a restart and the switchover of a rollout.
func TestInDatabase(t *testing.T) {
	// A Deriver per call: it remembers a spec by (UID, generation), and
	// the clusters here share both.
	facts := func(pg *v1.Postgresql, objs ...runtime.Object) fsm.Facts {
		return NewDeriver(cluster.Options{}, true).Facts(objects(pg, objs...), now)
	}
	bare := newPG("c1", 2)
	bare.Spec.Users, bare.Spec.Databases = nil, nil
	healthy := func(pg *v1.Postgresql, mods ...func(*corev1.Pod)) []runtime.Object {
		objs := []runtime.Object{statefulSet(pg), lock(pg, "c1-0"),
			pod(pg, 0, master, memberData("master", 100, false)), pod(pg, 1, memberData("replica", 90, false))}
		for i, m := range mods {
			if m != nil {
				m(objs[2+i].(*corev1.Pod))
			}
		}
		return append(objs, credentials(pg, "1")...)
	}

	f := facts(bare, healthy(bare)...)
	if !f.Sync.Bootstrap || f.Sync.Hash == "" || !f.Config.Bootstrap || f.Config.Hash == "" {
		t.Errorf("a cluster with no users, databases nor settings is Patroni's bootstrap: %+v %+v", f.Sync, f.Config)
	}
	if f.Target != "c1-0" || f.NoTarget != "" {
		t.Errorf("target %q (%q), want c1-0", f.Target, f.NoTarget)
	}

	full := newPG("c1", 2)
	full.Spec.Users = map[string]v1.UserFlags{"app": {"createdb"}, "reader": {}}
	full.Spec.Databases = map[string]string{"appdb": "app"}
	full.Spec.PostgreSQL.Parameters = map[string]string{"work_mem": "8MB", "shared_buffers": "1GB"}
	f = facts(full, healthy(full)...)
	if f.Sync.Bootstrap || !f.Config.Bootstrap {
		t.Errorf("users and databases are no bootstrap; the StatefulSet bootstraps the spec's configuration: %+v %+v", f.Sync, f.Config)
	}
	// A parameter edited since the StatefulSet was made: not what the
	// cluster bootstrapped with.
	later := full.DeepCopy()
	later.Generation = 2
	later.Spec.PostgreSQL.Parameters["work_mem"] = "16MB"
	if l := facts(later, healthy(full)...); l.Config.Bootstrap || l.Config.Hash == f.Config.Hash {
		t.Errorf("an edited parameter: %+v", l.Config)
	}
	// How long Patroni may take to apply the configuration: its default
	// loop_wait, or the spec's.
	if f.LoopWait != 10*time.Second {
		t.Errorf("loop_wait %v, want Patroni's default 10s", f.LoopWait)
	}
	short := full.DeepCopy()
	short.Spec.Patroni = &v1.Patroni{LoopWait: 2}
	if s := facts(short, healthy(short)...); s.LoopWait != 2*time.Second {
		t.Errorf("loop_wait %v, want the spec's 2s", s.LoopWait)
	}
	if !reflect.DeepEqual(f.Users, []string{"app", "reader"}) || !reflect.DeepEqual(f.Databases, []string{"appdb"}) ||
		!reflect.DeepEqual(f.ConfigParameters, []string{"work_mem"}) {
		t.Errorf("users %v databases %v parameters %v", f.Users, f.Databases, f.ConfigParameters)
	}

	// A password's Secret changed (rotated, re-created): a new sync.
	changed := facts(full, append(healthy(full)[:4], credentials(full, "2")...)...)
	if changed.Sync.Hash == f.Sync.Hash || changed.Config.Hash != f.Config.Hash {
		t.Errorf("a new Secret version must change the sync only: %v -> %v, %v -> %v", f.Sync.Hash, changed.Sync.Hash, f.Config.Hash, changed.Config.Hash)
	}
	// A Secret missing from the cache: the sync is not known yet.
	if missing := facts(full, healthy(full)[:5]...); missing.Sync.Hash != "" {
		t.Errorf("sync hash %q with Secrets missing", missing.Sync.Hash)
	}
	// A sync request: a new sync and a new configuration apply.
	requested := full.DeepCopy()
	requested.Annotations = map[string]string{v1.AnnotationSyncRequestedAt: "2026-12-01T10:00:00Z"}
	r := facts(requested, healthy(requested)...)
	if r.Sync.Hash == f.Sync.Hash || r.Config.Hash == f.Config.Hash || r.SyncRequest == "" {
		t.Errorf("a sync request must ask for both again: %+v", r)
	}
	// A flag change: a new sync; the pods are untouched.
	edited := full.DeepCopy()
	edited.Generation = 2
	edited.Spec.Users["reader"] = v1.UserFlags{"nologin"}
	if e := facts(edited, healthy(edited)...); e.Sync.Hash == f.Sync.Hash {
		t.Errorf("a flag change must change the sync")
	}

	// No member data on the primary: nowhere to send it yet.
	f = facts(full, healthy(full, func(p *corev1.Pod) { delete(p.Annotations, patroni.StatusAnnotation) })...)
	if f.Target != "" || f.NoTarget == "" {
		t.Errorf("target %q without member data (%q)", f.Target, f.NoTarget)
	}

	// Restart pending on both: the replica first.
	f = facts(bare, healthy(bare, memberData("master", 100, true), memberData("replica", 90, true))...)
	if !reflect.DeepEqual(f.PendingRestart, []string{"c1-0", "c1-1"}) || f.Restart == nil || f.Restart.Name != "c1-1" {
		t.Errorf("pending %v restart %+v, want c1-1 first", f.PendingRestart, f.Restart)
	}
	// Then the primary.
	f = facts(bare, healthy(bare, memberData("master", 100, true))...)
	if f.Restart == nil || f.Restart.Name != "c1-0" {
		t.Errorf("restart %+v, want c1-0", f.Restart)
	}
	// Not while a pod is not Ready.
	f = facts(bare, healthy(bare, memberData("master", 100, true), notReady)...)
	if f.Restart != nil {
		t.Errorf("restart %+v while a pod is not Ready", f.Restart)
	}

	// A rollout's last step is the primary: switch over to the replica
	// that received the most WAL first.
	three := newPG("c1", 3)
	three.Spec.Users, three.Spec.Databases = nil, nil
	objs := []runtime.Object{statefulSet(three), lock(three, "c1-0"),
		pod(three, 0, master, outdated, memberData("master", 300, false)),
		pod(three, 1, memberData("replica", 250, false)), pod(three, 2, memberData("replica", 290, false))}
	f = facts(three, objs...)
	if f.Switchover == nil || f.Switchover.From != "c1-0" || f.Switchover.To != "c1-2" || len(f.Replace) != 0 {
		t.Errorf("switchover %+v replace %v, want c1-0 -> c1-2 and nothing replaced", f.Switchover, f.Replace)
	}
	// Off: the primary is replaced as before.
	if f := NewDeriver(cluster.Options{}, false).Facts(objects(three, objs...), now); f.Switchover != nil || len(f.Replace) != 1 {
		t.Errorf("switchover off: %+v, replace %v", f.Switchover, f.Replace)
	}
	// The replicas are Ready but their Patroni has not published its
	// member data yet: wait for it rather than fail over.
	objs[3], objs[4] = pod(three, 1), pod(three, 2)
	if f := facts(three, objs...); f.Switchover != nil || len(f.Replace) != 0 {
		t.Errorf("replicas without member data yet: switchover %+v, replace %v; want to wait", f.Switchover, f.Replace)
	}
	// No replica may take over (tagged nofailover): the primary is
	// replaced, and Patroni fails over as it can.
	noFailover := func(p *corev1.Pod) {
		memberData("replica", 250, false)(p)
		p.Annotations[patroni.StatusAnnotation] = strings.Replace(p.Annotations[patroni.StatusAnnotation], `"version"`, `"tags":{"nofailover":true},"version"`, 1)
	}
	objs[3], objs[4] = pod(three, 1, noFailover), pod(three, 2, noFailover)
	if f := facts(three, objs...); f.Switchover != nil || len(f.Replace) != 1 || f.Replace[0].Name != "c1-0" {
		t.Errorf("no candidate: switchover %+v, replace %v; want c1-0 replaced", f.Switchover, f.Replace)
	}
}
