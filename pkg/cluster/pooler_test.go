package cluster

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/pooler"
)

// withPooler returns the minimal sample with the master pooler (and the
// replica one when replica) enabled.
func withPooler(t *testing.T, replica bool) *v1.Postgresql {
	t.Helper()
	pg := loadSample(t, "minimal")
	pg.Spec.EnableConnectionPooler = ptr.To(true)
	if replica {
		pg.Spec.EnableReplicaConnectionPooler = ptr.To(true)
	}
	return pg
}

func TestPoolers(t *testing.T) {
	c := "acid-minimal-cluster"
	cases := []struct {
		name            string
		master, replica *bool
		want            []string // role/deployment/service/pdb
	}{
		{"unset", nil, nil, nil},
		{"both false", ptr.To(false), ptr.To(false), nil},
		{"master only", ptr.To(true), nil, []string{"master/" + c + "-pooler/" + c + "-pooler/postgres-" + c + "-pooler-pdb"}},
		{"replica only", ptr.To(false), ptr.To(true), []string{"replica/" + c + "-pooler-repl/" + c + "-pooler-repl/postgres-" + c + "-pooler-repl-pdb"}},
		{"both, master first", ptr.To(true), ptr.To(true), []string{
			"master/" + c + "-pooler/" + c + "-pooler/postgres-" + c + "-pooler-pdb",
			"replica/" + c + "-pooler-repl/" + c + "-pooler-repl/postgres-" + c + "-pooler-repl-pdb",
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pg := loadSample(t, "minimal")
			pg.Spec.EnableConnectionPooler, pg.Spec.EnableReplicaConnectionPooler = tc.master, tc.replica
			var got []string
			for _, p := range Poolers(pg, Options{}) {
				got = append(got, p.Role+"/"+p.Deployment.Name+"/"+p.Service.Name+"/"+p.PodDisruptionBudget.Name)
				for _, o := range []Object{p.Deployment, p.Service, p.PodDisruptionBudget} {
					if o.GetNamespace() != pg.Namespace || len(o.GetOwnerReferences()) != 1 || o.GetOwnerReferences()[0].UID != pg.UID {
						t.Errorf("%s: namespace %q owners %v, want %s controlled by the cluster", o.GetName(), o.GetNamespace(), o.GetOwnerReferences(), pg.Namespace)
					}
					if l := o.GetLabels(); l[LabelApplication] != ApplicationPooler || l[LabelConnectionPooler] != p.Deployment.Name || l[LabelClusterName] != pg.Name {
						t.Errorf("%s: labels %v", o.GetName(), l)
					}
				}
				sel := PoolerSelector(pg.Name, p.Role)
				if !mapsEqual(p.Deployment.Spec.Selector.MatchLabels, sel) || !mapsEqual(p.Service.Spec.Selector, sel) ||
					!mapsEqual(p.PodDisruptionBudget.Spec.Selector.MatchLabels, sel) {
					t.Errorf("%s: selectors %v %v %v, want %v", p.Role, p.Deployment.Spec.Selector.MatchLabels, p.Service.Spec.Selector,
						p.PodDisruptionBudget.Spec.Selector.MatchLabels, sel)
				}
				if ports := p.Service.Spec.Ports; len(ports) != 1 || ports[0].Port != 5432 || ports[0].TargetPort != intstr.FromString(PoolerPortName) {
					t.Errorf("%s: service ports %v, want 5432 to %s", p.Service.Name, ports, PoolerPortName)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("poolers %v, want %v", got, tc.want)
			}
			if n := len(buildAll(t, pg).Poolers); n != len(tc.want) {
				t.Errorf("Build made %d poolers, want %d", n, len(tc.want))
			}
		})
	}
}

// envOf returns the container's environment by name.
func envOf(c corev1.Container) map[string]corev1.EnvVar {
	out := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		out[e.Name] = e
	}
	return out
}

// TestPoolerPodContract checks the pod template against what the test
// kubelet requires of a pooler pod (docs/testbed.md, "Connection pooler
// pods").
func TestPoolerPodContract(t *testing.T) {
	for _, role := range PoolerRoles {
		t.Run(role, func(t *testing.T) {
			pg := withPooler(t, true)
			d := PoolerDeployment(pg, role, Options{})
			pod := d.Spec.Template
			if len(pod.Spec.Containers) != 1 {
				t.Fatalf("%d containers, want 1", len(pod.Spec.Containers))
			}
			c := pod.Spec.Containers[0]
			name := PoolerName(pg.Name, role)
			host := pg.Name
			if role == RoleReplica {
				host += "-repl"
			}
			checks := []struct {
				what      string
				got, want any
			}{
				{"container", c.Name, "connection-pooler"},
				{"ports", c.Ports, []corev1.ContainerPort{{Name: "pgbouncer", ContainerPort: 5432, Protocol: corev1.ProtocolTCP}}},
				{"readiness", c.ReadinessProbe.TCPSocket, &corev1.TCPSocketAction{Port: intstr.FromString("pgbouncer")}},
				{"application label", pod.Labels["application"], "db-connection-pooler"},
				{"pooler label", pod.Labels["connection-pooler"], name},
				{"cluster label", pod.Labels["cluster-name"], pg.Name},
				{"replicas", d.Spec.Replicas, ptr.To[int32](2)},
				{"selector matches the pods", containsAll(pod.Labels, d.Spec.Selector.MatchLabels), true},
				{"template hash", pod.Annotations[AnnotationPodTemplateHash], d.Annotations[AnnotationPodTemplateHash]},
			}
			for _, ch := range checks {
				if !apiequality.Semantic.DeepEqual(ch.got, ch.want) {
					t.Errorf("%s = %v, want %v", ch.what, ch.got, ch.want)
				}
			}
			if pod.Annotations[AnnotationPodTemplateHash] == "" {
				t.Errorf("no template hash")
			}
			env := envOf(c)
			want := map[string]string{
				"PGHOST": host, "PGPORT": "5432", "PGUSER": "pooler", "PGSCHEMA": "pooler",
				"CONNECTION_POOLER_PORT": "5432", "CONNECTION_POOLER_MODE": "transaction",
				"CONNECTION_POOLER_DEFAULT_SIZE": "15", "CONNECTION_POOLER_MIN_SIZE": "7", "CONNECTION_POOLER_RESERVE_SIZE": "7",
				"CONNECTION_POOLER_MAX_CLIENT_CONN": "10000", "CONNECTION_POOLER_MAX_DB_CONN": "30",
			}
			for k, v := range want {
				if got := env[k]; got.Value != v || got.ValueFrom != nil {
					t.Errorf("%s = %q (from %v), want %q", k, got.Value, got.ValueFrom, v)
				}
			}
			pw := env["PGPASSWORD"]
			if pw.Value != "" || pw.ValueFrom == nil || pw.ValueFrom.SecretKeyRef == nil ||
				pw.ValueFrom.SecretKeyRef.Name != SecretName("pooler", pg.Name) || pw.ValueFrom.SecretKeyRef.Key != "password" {
				t.Errorf("PGPASSWORD %+v, want the password of %s", pw, SecretName("pooler", pg.Name))
			}
			if len(env) != len(want)+1 {
				t.Errorf("env has %d variables, want %d: %v", len(env), len(want)+1, c.Env)
			}
			// What the pooler image's start-up (pgloop pooler) takes, the
			// password resolved from its Secret.
			resolved := map[string]string{"PGPASSWORD": "from-the-secret"}
			for k, v := range env {
				if v.ValueFrom == nil {
					resolved[k] = v.Value
				}
			}
			if _, err := pooler.ParseSettings(resolved); err != nil {
				t.Errorf("pgloop pooler refuses the pod's environment: %v", err)
			}
		})
	}
}

// TestPoolerSizes checks how maxDBConnections is split among the pods,
// and that what the kubelet requires to be at least 1 is, however small
// the share.
func TestPoolerSizes(t *testing.T) {
	cases := []struct {
		name                      string
		pooler                    *v1.ConnectionPooler
		perPod, size, min, client string
	}{
		{"defaults", nil, "30", "15", "7", "10000"},
		{"user's user, schema and mode", &v1.ConnectionPooler{User: "bouncer", Schema: "lookup", Mode: "session"}, "30", "15", "7", "10000"},
		{"4 instances, 100", &v1.ConnectionPooler{NumberOfInstances: ptr.To[int32](4), MaxDBConnections: ptr.To[int32](100)}, "25", "12", "6", "10000"},
		{"3 instances, 1 connection", &v1.ConnectionPooler{NumberOfInstances: ptr.To[int32](3), MaxDBConnections: ptr.To[int32](1)}, "1", "1", "0", "10000"},
		{"1 instance, 1 connection", &v1.ConnectionPooler{NumberOfInstances: ptr.To[int32](1), MaxDBConnections: ptr.To[int32](1)}, "1", "1", "0", "10000"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pg := withPooler(t, false)
			pg.Spec.ConnectionPooler = tc.pooler
			if errs := pg.Validate(); len(errs) > 0 {
				t.Fatalf("invalid: %v", errs)
			}
			d := PoolerDeployment(pg, RoleMaster, Options{})
			env := envOf(d.Spec.Template.Spec.Containers[0])
			mode, user, schema := "transaction", "pooler", "pooler"
			if p := tc.pooler; p != nil {
				mode, user, schema = orDefault(p.Mode, mode), orDefault(p.User, user), orDefault(p.Schema, schema)
				if p.NumberOfInstances != nil && *d.Spec.Replicas != *p.NumberOfInstances {
					t.Errorf("replicas %d, want %d", *d.Spec.Replicas, *p.NumberOfInstances)
				}
			}
			want := map[string]string{
				"CONNECTION_POOLER_MAX_DB_CONN": tc.perPod, "CONNECTION_POOLER_DEFAULT_SIZE": tc.size,
				"CONNECTION_POOLER_MIN_SIZE": tc.min, "CONNECTION_POOLER_RESERVE_SIZE": tc.min,
				"CONNECTION_POOLER_MAX_CLIENT_CONN": tc.client, "CONNECTION_POOLER_MODE": mode,
				"PGUSER": user, "PGSCHEMA": schema,
			}
			for k, v := range want {
				if got := env[k].Value; got != v {
					t.Errorf("%s = %q, want %q", k, got, v)
				}
			}
			for _, k := range []string{"CONNECTION_POOLER_DEFAULT_SIZE", "CONNECTION_POOLER_MAX_CLIENT_CONN", "CONNECTION_POOLER_MAX_DB_CONN"} {
				if v := env[k].Value; v == "" || v == "0" || strings.HasPrefix(v, "-") {
					t.Errorf("%s = %q: the kubelet requires at least 1", k, v)
				}
			}
			if got := env["PGPASSWORD"].ValueFrom.SecretKeyRef.Name; got != SecretName(user, pg.Name) {
				t.Errorf("PGPASSWORD from %s, want the Secret of %s", got, user)
			}
		})
	}
}

// orDefault returns v, or def when v is empty.
func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

func TestPoolerDeploymentFromSpec(t *testing.T) {
	full := loadSample(t, "full")
	full.Spec.EnableConnectionPooler = ptr.To(true)
	d := PoolerDeployment(full, RoleMaster, Options{})
	if got := d.Spec.Template.Spec.Tolerations; !apiequality.Semantic.DeepEqual(got, full.Spec.Tolerations) || len(got) == 0 {
		t.Errorf("tolerations %v, want the spec's %v", got, full.Spec.Tolerations)
	}
	if a := d.Spec.Template.Spec.Affinity; a == nil || !apiequality.Semantic.DeepEqual(a.NodeAffinity, full.Spec.NodeAffinity) {
		t.Errorf("affinity %v, want the spec's node affinity %v", a, full.Spec.NodeAffinity)
	}
	// Copies: the spec's are not shared with the Deployment.
	d.Spec.Template.Spec.Tolerations[0].Key = "changed"
	if full.Spec.Tolerations[0].Key == "changed" {
		t.Errorf("the Deployment shares the spec's tolerations")
	}
	minimal := withPooler(t, false)
	if spec := PoolerDeployment(minimal, RoleMaster, Options{}).Spec.Template.Spec; spec.Tolerations != nil || spec.Affinity != nil {
		t.Errorf("no tolerations nor affinity in the spec: got %v %v", spec.Tolerations, spec.Affinity)
	}

	images := []struct {
		name, spec, opts, want string
	}{
		{"default", "", "", DefaultPoolerImage},
		{"operator's", "", "example.org/pgbouncer:op", "example.org/pgbouncer:op"},
		{"spec's wins", "example.org/pgbouncer:spec", "example.org/pgbouncer:op", "example.org/pgbouncer:spec"},
	}
	for _, tc := range images {
		pg := withPooler(t, false)
		if tc.spec != "" {
			pg.Spec.ConnectionPooler = &v1.ConnectionPooler{DockerImage: tc.spec}
		}
		if got := PoolerDeployment(pg, RoleMaster, Options{PoolerImage: tc.opts}).Spec.Template.Spec.Containers[0].Image; got != tc.want {
			t.Errorf("%s image: %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestPoolerResources(t *testing.T) {
	q := func(s string) *resource.Quantity { return ptr.To(resource.MustParse(s)) }
	list := func(cpu, mem string) corev1.ResourceList {
		return corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}
	}
	cases := []struct {
		name     string
		res      *v1.Resources
		req, lim corev1.ResourceList
	}{
		{"defaults", nil, list("500m", "100Mi"), list("1", "100Mi")},
		{"user's values", &v1.Resources{
			Requests: &v1.ResourceDescription{CPU: q("250m"), Memory: q("64Mi")},
			Limits:   &v1.ResourceDescription{CPU: q("2"), Memory: q("256Mi")},
		}, list("250m", "64Mi"), list("2", "256Mi")},
		{"a memory request alone, above the default limit", &v1.Resources{
			Requests: &v1.ResourceDescription{Memory: q("200Mi")},
		}, list("500m", "200Mi"), list("1", "200Mi")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pg := withPooler(t, false)
			pg.Spec.ConnectionPooler = &v1.ConnectionPooler{Resources: tc.res}
			got := PoolerDeployment(pg, RoleMaster, Options{}).Spec.Template.Spec.Containers[0].Resources
			if !apiequality.Semantic.DeepEqual(got.Requests, tc.req) || !apiequality.Semantic.DeepEqual(got.Limits, tc.lim) {
				t.Errorf("resources %v / %v, want %v / %v", got.Requests, got.Limits, tc.req, tc.lim)
			}
		})
	}
	// The cluster's resources are not the pooler's.
	pg := withPooler(t, false)
	pg.Spec.Resources = &v1.Resources{Requests: &v1.ResourceDescription{CPU: q("3")}}
	if got := PoolerDeployment(pg, RoleMaster, Options{DefaultRequests: list("2", "2Gi")}).Spec.Template.Spec.Containers[0].Resources.Requests; !apiequality.Semantic.DeepEqual(got, list("500m", "100Mi")) {
		t.Errorf("requests %v: the cluster's resources or the StatefulSet's defaults leaked into the pooler", got)
	}
}

func TestPoolerTemplateHash(t *testing.T) {
	pg := withPooler(t, false)
	base := PoolerDeployment(pg, RoleMaster, Options{})
	hash := base.Spec.Template.Annotations[AnnotationPodTemplateHash]
	if again := PoolerDeployment(pg.DeepCopy(), RoleMaster, Options{}); again.Spec.Template.Annotations[AnnotationPodTemplateHash] != hash {
		t.Errorf("the hash changed with nothing changed")
	}
	session := pg.DeepCopy()
	session.Spec.ConnectionPooler = &v1.ConnectionPooler{Mode: "session"}
	if h := PoolerDeployment(session, RoleMaster, Options{}).Spec.Template.Annotations[AnnotationPodTemplateHash]; h == hash {
		t.Errorf("the hash did not change with the mode")
	}
	if h := PoolerDeployment(pg, RoleReplica, Options{}).Spec.Template.Annotations[AnnotationPodTemplateHash]; h == hash {
		t.Errorf("the replica pooler's template has the master's hash")
	}
}

// served is d as the apiserver and the Deployment controller return it:
// with a resourceVersion, defaults and additions of their own.
func served(d *appsv1.Deployment) *appsv1.Deployment {
	out := d.DeepCopy()
	out.ResourceVersion, out.UID, out.Generation = "42", "dep-uid", 3
	out.Labels["example.org/added"] = "by someone"
	out.Annotations["deployment.kubernetes.io/revision"] = "3"
	out.Spec.Selector.MatchLabels = map[string]string{"old": "selector"}
	out.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType}
	out.Spec.RevisionHistoryLimit = ptr.To[int32](10)
	out.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyAlways
	out.Status = appsv1.DeploymentStatus{ObservedGeneration: 3, Replicas: 2, ReadyReplicas: 2, AvailableReplicas: 2}
	return out
}

func TestDeploymentNeedsUpdate(t *testing.T) {
	pg := withPooler(t, false)
	desired := PoolerDeployment(pg, RoleMaster, Options{})
	session := pg.DeepCopy()
	session.Spec.ConnectionPooler = &v1.ConnectionPooler{Mode: "session"}
	cases := []struct {
		name string
		edit func(*appsv1.Deployment)
		want bool
	}{
		{"as served", func(*appsv1.Deployment) {}, false},
		{"replicas", func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To[int32](3) }, true},
		{"template hash", func(d *appsv1.Deployment) {
			d.Spec.Template = PoolerDeployment(session, RoleMaster, Options{}).Spec.Template
		}, true},
		{"a label missing", func(d *appsv1.Deployment) { delete(d.Labels, LabelTeam) }, true},
		{"the hash annotation missing", func(d *appsv1.Deployment) { delete(d.Annotations, AnnotationPodTemplateHash) }, true},
		{"a pod label changed by hand is not seen (the hash is compared)", func(d *appsv1.Deployment) {
			d.Spec.Template.Labels["example.org/x"] = "y"
		}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cur := served(desired)
			tc.edit(cur)
			if got := DeploymentNeedsUpdate(cur, desired); got != tc.want {
				t.Errorf("DeploymentNeedsUpdate = %v, want %v", got, tc.want)
			}
			if !tc.want {
				return
			}
			out := ApplyDeployment(cur, desired)
			if DeploymentNeedsUpdate(out, desired) {
				t.Errorf("applied, still needs an update")
			}
			if out.ResourceVersion != cur.ResourceVersion || !apiequality.Semantic.DeepEqual(out.Spec.Selector, cur.Spec.Selector) {
				t.Errorf("applied: resourceVersion %q selector %v, want current's %q %v",
					out.ResourceVersion, out.Spec.Selector, cur.ResourceVersion, cur.Spec.Selector)
			}
			if out.Labels["example.org/added"] != "by someone" || out.Annotations["deployment.kubernetes.io/revision"] != "3" {
				t.Errorf("applied: others' labels %v or annotations %v lost", out.Labels, out.Annotations)
			}
			if !apiequality.Semantic.DeepEqual(out.Spec.Template, desired.Spec.Template) || *out.Spec.Replicas != *desired.Spec.Replicas {
				t.Errorf("applied: template or replicas not the desired ones")
			}
		})
	}
}

func TestDeploymentReady(t *testing.T) {
	base := func(edit func(*appsv1.Deployment)) *appsv1.Deployment {
		d := &appsv1.Deployment{}
		d.Generation = 2
		d.Spec.Replicas = ptr.To[int32](2)
		d.Status = appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 2, UpdatedReplicas: 2, ReadyReplicas: 2, AvailableReplicas: 2}
		edit(d)
		return d
	}
	cases := []struct {
		name string
		d    *appsv1.Deployment
		ok   bool
		why  string
	}{
		{"ready", base(func(*appsv1.Deployment) {}), true, ""},
		{"observed generation behind", base(func(d *appsv1.Deployment) { d.Status.ObservedGeneration = 1 }),
			false, "its controller has not seen the latest change"},
		{"updated fewer than wanted", base(func(d *appsv1.Deployment) { d.Status.UpdatedReplicas = 1 }),
			false, "1 of 2 pods updated"},
		{"old pods still there", base(func(d *appsv1.Deployment) { d.Status.Replicas = 3 }),
			false, "1 old pods still running"},
		{"available fewer than wanted", base(func(d *appsv1.Deployment) { d.Status.AvailableReplicas = 1 }),
			false, "1 of 2 pods ready"},
		{"a ReplicaFailure condition", base(func(d *appsv1.Deployment) {
			d.Status.AvailableReplicas = 0
			d.Status.Conditions = []appsv1.DeploymentCondition{
				{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionFalse, Reason: "MinimumReplicasUnavailable", Message: "no"},
				{Type: appsv1.DeploymentReplicaFailure, Status: corev1.ConditionTrue, Reason: "FailedCreate", Message: `pods "p" is forbidden: exceeded quota`},
			}
		}), false, `0 of 2 pods ready (FailedCreate: pods "p" is forbidden: exceeded quota)`},
		{"progress deadline exceeded", base(func(d *appsv1.Deployment) {
			d.Status.AvailableReplicas = 1
			d.Status.Conditions = []appsv1.DeploymentCondition{
				{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse, Reason: "ProgressDeadlineExceeded", Message: "too slow"},
			}
		}), false, "1 of 2 pods ready (ProgressDeadlineExceeded: too slow)"},
		{"a ReplicaFailure condition that is False says nothing", base(func(d *appsv1.Deployment) {
			d.Status.AvailableReplicas = 1
			d.Status.Conditions = []appsv1.DeploymentCondition{
				{Type: appsv1.DeploymentReplicaFailure, Status: corev1.ConditionFalse, Reason: "R", Message: "m"},
			}
		}), false, "1 of 2 pods ready"},
		{"unset replicas mean 1", base(func(d *appsv1.Deployment) {
			d.Spec.Replicas = nil
			d.Status.Replicas, d.Status.UpdatedReplicas, d.Status.AvailableReplicas = 1, 1, 1
		}), true, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ok, why := DeploymentReady(tc.d)
			if ok != tc.ok || why != tc.why {
				t.Errorf("DeploymentReady = %v %q, want %v %q", ok, why, tc.ok, tc.why)
			}
		})
	}
}

func TestPoolerSecret(t *testing.T) {
	cases := []struct {
		name            string
		master, replica bool
		user            string
		want            string // the last Secret's user; "" for no pooler Secret
	}{
		{"off", false, false, "", ""},
		{"off with a pooler user set", false, false, "bouncer", ""},
		{"master", true, false, "", "pooler"},
		{"replica only", false, true, "", "pooler"},
		{"both, user set", true, true, "bouncer", "bouncer"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pg := loadSample(t, "minimal")
			pg.Spec.EnableConnectionPooler, pg.Spec.EnableReplicaConnectionPooler = ptr.To(tc.master), ptr.To(tc.replica)
			if tc.user != "" {
				pg.Spec.ConnectionPooler = &v1.ConnectionPooler{User: tc.user}
			}
			secrets, err := Secrets(pg, seeded(1))
			if err != nil {
				t.Fatal(err)
			}
			users := 2 + len(pg.Spec.Users)
			var names []string
			for _, s := range secrets {
				names = append(names, s.Name)
			}
			switch {
			case tc.want == "" && len(secrets) != users:
				t.Errorf("secrets %v, want %d without the pooler's", names, users)
			case tc.want != "" && (len(secrets) != users+1 || secrets[users].Name != SecretName(tc.want, pg.Name) ||
				string(secrets[users].Data[SecretUsernameKey]) != tc.want):
				t.Errorf("secrets %v, want %d, the last %s's", names, users+1, tc.want)
			}
			if !slices.Equal(Names(pg).Secrets, names) {
				t.Errorf("Names says %v, Secrets made %v", Names(pg).Secrets, names)
			}
		})
	}
}

func TestPoolerPodDisruptionBudget(t *testing.T) {
	for _, tc := range []struct{ instances, want int32 }{{1, 0}, {2, 1}, {5, 1}} {
		pg := withPooler(t, false)
		pg.Spec.ConnectionPooler = &v1.ConnectionPooler{NumberOfInstances: ptr.To(tc.instances)}
		pdb := PoolerPodDisruptionBudget(pg, RoleMaster)
		if got := *pdb.Spec.MinAvailable; got != intstr.FromInt32(tc.want) {
			t.Errorf("%d instances: minAvailable %s, want %d", tc.instances, got.String(), tc.want)
		}
		if pdb.Spec.MaxUnavailable != nil {
			t.Errorf("%d instances: maxUnavailable set", tc.instances)
		}
	}
	// Unset: the default 2.
	if got := *PoolerPodDisruptionBudget(withPooler(t, false), RoleMaster).Spec.MinAvailable; got != intstr.FromInt32(1) {
		t.Errorf("default instances: minAvailable %s, want 1", got.String())
	}
}
