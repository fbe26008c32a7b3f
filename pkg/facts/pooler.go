package facts

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
)

// poolers compares the connection poolers' Deployments that exist (have)
// with those the spec enables. current is false when one the spec enables
// is missing or differs from it (its pod template, its replicas), or one
// the spec no longer enables is still there: the ensure effect has work.
// waiting says, once they are current, which enabled pooler does not run
// all its pods yet, how far it is and, from pods (the poolers' pods), why
// one of them is stuck; empty when all do.
func (d *Deriver) poolers(s *derived, pg *v1.Postgresql, have []*appsv1.Deployment, pods []*corev1.Pod) (current bool, waiting string) {
	want := d.desiredPoolers(s, pg)
	current = true
	for _, dep := range have {
		if ref := metav1.GetControllerOf(dep); ref == nil || ref.UID != pg.UID || dep.DeletionTimestamp != nil {
			// Another's (the ensure fails on it, and says so), or
			// going.
			current = current && want[dep.Name] == nil
			continue
		}
		desired := want[dep.Name]
		switch {
		case desired == nil:
			current = false
		case cluster.DeploymentNeedsUpdate(dep, desired):
			current = false
		case waiting == "":
			if ok, why := cluster.DeploymentReady(dep); !ok {
				waiting = "connection pooler " + dep.Name + ": " + why + stuckPoolerPod(pods, dep.Name)
			}
		}
	}
	for name := range want {
		if !hasDeployment(have, name) {
			current = false
		}
	}
	return current, waiting
}

// desiredPoolers returns the poolers' Deployments pg asks for, by name;
// s must be pg's. They are built once per generation.
func (d *Deriver) desiredPoolers(s *derived, pg *v1.Postgresql) map[string]*appsv1.Deployment {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !s.poolersBuilt {
		s.poolersBuilt = true
		for _, p := range cluster.Poolers(pg, d.build) {
			if s.poolers == nil {
				s.poolers = map[string]*appsv1.Deployment{}
			}
			s.poolers[p.Deployment.Name] = p.Deployment
		}
	}
	return s.poolers
}

// stuckPoolerPod says why the first stuck pod of the pooler name cannot
// run, as for the cluster's own pods (unschedulable, a container that
// cannot start): "; pod x: 0/3 nodes are available: ...". It is empty
// when none is stuck.
func stuckPoolerPod(pods []*corev1.Pod, name string) string {
	for _, p := range pods {
		if p.Labels[cluster.LabelConnectionPooler] != name || p.DeletionTimestamp != nil {
			continue
		}
		if msg, ok := schedulingFailure(p); ok {
			return "; " + podMessage(p.Name, msg)
		}
		if w := stuckContainer(p); w != nil {
			msg := w.Message
			if msg == "" {
				msg = w.Reason
			}
			return "; " + podMessage(p.Name, w.Reason+": "+msg)
		}
	}
	return ""
}

func hasDeployment(have []*appsv1.Deployment, name string) bool {
	for _, dep := range have {
		if dep.Name == name {
			return true
		}
	}
	return false
}
