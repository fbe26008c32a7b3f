package cluster

import (
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// PodDisruptionBudget keeps voluntary disruptions (node drains, cluster
// autoscaler) from evicting the primary: it selects the pod labelled
// spilo-role=master and requires it to stay available. A drain of the
// primary's node then waits until the primary has moved (a switchover),
// after which the old primary is a replica and may go. A stopped cluster
// (0 instances) requires nothing, so it never blocks a drain.
func PodDisruptionBudget(pg *v1.Postgresql) *policyv1.PodDisruptionBudget {
	var minAvailable int32
	if pg.Spec.NumberOfInstances > 0 {
		minAvailable = 1
	}
	return &policyv1.PodDisruptionBudget{
		TypeMeta:   metav1.TypeMeta{APIVersion: policyv1.SchemeGroupVersion.String(), Kind: "PodDisruptionBudget"},
		ObjectMeta: objectMeta(pg, PodDisruptionBudgetName(pg.Name)),
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: ptr.To(intstr.FromInt32(minAvailable)),
			Selector:     &metav1.LabelSelector{MatchLabels: RoleSelector(pg.Name, RoleMaster)},
		},
	}
}
