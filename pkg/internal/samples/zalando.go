package samples

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// ZalandoUID is the UID of ZalandoStatefulSet's StatefulSet.
const ZalandoUID = types.UID("0a0b0c0d-1e1f-4a2b-8c3d-4e5f6a7b8c9d")

// ZalandoStatefulSet is the StatefulSet the zalando operator makes for pg
// (commit a7aaad0a, kubernetes_use_configmaps on), with what the adoption
// looks at: labels, selector, claim template, strategy and the Spilo
// container's Patroni environment. It has no owner reference.
func ZalandoStatefulSet(pg *v1.Postgresql) *appsv1.StatefulSet {
	labels := map[string]string{"application": "spilo", "cluster-name": pg.Name, "team": pg.Spec.TeamID}
	selector := map[string]string{"application": "spilo", "cluster-name": pg.Name}
	return &appsv1.StatefulSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "StatefulSet"},
		ObjectMeta: metav1.ObjectMeta{Name: pg.Name, Namespace: pg.Namespace, Labels: labels, UID: ZalandoUID},
		Spec: appsv1.StatefulSetSpec{
			Replicas:    ptr.To(pg.Spec.NumberOfInstances),
			Selector:    &metav1.LabelSelector{MatchLabels: selector},
			ServiceName: pg.Name,
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					ServiceAccountName: "postgres-pod",
					Containers: []corev1.Container{{Name: "postgres", Image: "ghcr.io/zalando/spilo-18:4.1-p2", Env: []corev1.EnvVar{
						{Name: "SCOPE", Value: pg.Name},
						{Name: "KUBERNETES_SCOPE_LABEL", Value: "cluster-name"},
						{Name: "KUBERNETES_ROLE_LABEL", Value: "spilo-role"},
						{Name: "KUBERNETES_LABELS", Value: `{"application":"spilo"}`},
						{Name: "DCS_ENABLE_KUBERNETES_API", Value: "true"},
						{Name: "KUBERNETES_USE_CONFIGMAPS", Value: "true"},
					}}},
				},
			},
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{ObjectMeta: metav1.ObjectMeta{Name: "pgdata", Labels: labels}}},
			UpdateStrategy:       appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType},
			PodManagementPolicy:  appsv1.OrderedReadyPodManagement,
		},
	}
}

// ZalandoEnv returns a copy of sts with the Spilo container's variable
// name set to value, or removed when value is "".
func ZalandoEnv(sts *appsv1.StatefulSet, name, value string) *appsv1.StatefulSet {
	out := sts.DeepCopy()
	c := &out.Spec.Template.Spec.Containers[0]
	env := c.Env[:0]
	for _, e := range c.Env {
		if e.Name != name {
			env = append(env, e)
		}
	}
	if value != "" {
		env = append(env, corev1.EnvVar{Name: name, Value: value})
	}
	c.Env = env
	return out
}
