package kubelet

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/validate/content"
)

// ParseLabel parses a node label given as key=value, as the kubelet's
// --node-labels does, and checks both halves the way the apiserver would, so
// a typo fails at start rather than at node registration.
func ParseLabel(s string) (key, value string, err error) {
	key, value, ok := strings.Cut(s, "=")
	if !ok {
		return "", "", fmt.Errorf("label %q: want key=value", s)
	}
	if errs := content.IsLabelKey(key); len(errs) > 0 {
		return "", "", fmt.Errorf("label %q: key: %s", s, strings.Join(errs, "; "))
	}
	if errs := content.IsLabelValue(value); len(errs) > 0 {
		return "", "", fmt.Errorf("label %q: value: %s", s, strings.Join(errs, "; "))
	}
	return key, value, nil
}

// ParseTaint parses a node taint given as key=value:Effect or key:Effect, as
// the kubelet's --register-with-taints does.
func ParseTaint(s string) (corev1.Taint, error) {
	spec, effect, ok := strings.Cut(s, ":")
	if !ok {
		return corev1.Taint{}, fmt.Errorf("taint %q: want key=value:Effect or key:Effect", s)
	}
	key, value, _ := strings.Cut(spec, "=")
	if errs := content.IsLabelKey(key); len(errs) > 0 {
		return corev1.Taint{}, fmt.Errorf("taint %q: key: %s", s, strings.Join(errs, "; "))
	}
	if errs := content.IsLabelValue(value); len(errs) > 0 {
		return corev1.Taint{}, fmt.Errorf("taint %q: value: %s", s, strings.Join(errs, "; "))
	}
	switch e := corev1.TaintEffect(effect); e {
	case corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
		return corev1.Taint{Key: key, Value: value, Effect: e}, nil
	default:
		return corev1.Taint{}, fmt.Errorf("taint %q: effect %q is not one of NoSchedule, PreferNoSchedule, NoExecute", s, effect)
	}
}
