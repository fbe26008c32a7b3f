package kubelet

import (
	"context"
	"fmt"
	"os"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
)

const (
	// podContext is the context of every pod's kubeconfig; Patroni 3.0.2
	// needs it named in PATRONI_KUBERNETES_CONTEXT (it defaults to
	// kind-kind).
	podContext = "pgkubelet"
	// tokenLifetime: Patroni never refreshes a token read from a
	// kubeconfig, so it gets one that outlives any test.
	tokenLifetime = 24 * 60 * 60
)

// podToken asks for a token of the pod's ServiceAccount bound to the pod, as
// the kubelet's projected token volume would: Patroni then has exactly the
// permissions the operator's Role grants.
func podToken(ctx context.Context, kube kubernetes.Interface, pod *corev1.Pod) (string, error) {
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	tr, err := kube.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: ptr.To[int64](tokenLifetime),
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("while requesting a token for ServiceAccount %s/%s: %w", pod.Namespace, sa, err)
	}
	return tr.Status.Token, nil
}

// podKubeconfig renders a kubeconfig reaching the apiserver of cfg with
// token, in context podContext.
func podKubeconfig(cfg *rest.Config, token string) ([]byte, error) {
	ca := cfg.CAData
	if len(ca) == 0 && cfg.CAFile != "" {
		var err error
		if ca, err = os.ReadFile(cfg.CAFile); err != nil {
			return nil, fmt.Errorf("while reading the apiserver's CA: %w", err)
		}
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["local"] = &clientcmdapi.Cluster{
		Server:                   cfg.Host,
		CertificateAuthorityData: ca,
		InsecureSkipTLSVerify:    cfg.Insecure,
	}
	kc.AuthInfos["pod"] = &clientcmdapi.AuthInfo{Token: token}
	kc.Contexts[podContext] = &clientcmdapi.Context{Cluster: "local", AuthInfo: "pod"}
	kc.CurrentContext = podContext
	return clientcmd.Write(*kc)
}

// cacheLookup resolves secretKeyRef and configMapKeyRef from the informers'
// caches.
type cacheLookup struct {
	secrets    listersv1.SecretLister
	configMaps listersv1.ConfigMapLister
}

// SecretKey returns key of Secret namespace/name.
func (l cacheLookup) SecretKey(namespace, name, key string) (string, bool, error) {
	s, err := l.secrets.Secrets(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	v, ok := s.Data[key]
	return string(v), ok, nil
}

// ConfigMapKey returns key of ConfigMap namespace/name.
func (l cacheLookup) ConfigMapKey(namespace, name, key string) (string, bool, error) {
	cm, err := l.configMaps.ConfigMaps(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	if v, ok := cm.Data[key]; ok {
		return v, true, nil
	}
	v, ok := cm.BinaryData[key]
	return string(v), ok, nil
}

// SecretData returns every key of Secret namespace/name, for envFrom.
func (l cacheLookup) SecretData(namespace, name string) (map[string]string, bool, error) {
	s, err := l.secrets.Secrets(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	out := make(map[string]string, len(s.Data))
	for k, v := range s.Data {
		out[k] = string(v)
	}
	return out, true, nil
}

// ConfigMapData returns every key of ConfigMap namespace/name, for envFrom.
func (l cacheLookup) ConfigMapData(namespace, name string) (map[string]string, bool, error) {
	cm, err := l.configMaps.ConfigMaps(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	out := make(map[string]string, len(cm.Data)+len(cm.BinaryData))
	for k, v := range cm.BinaryData {
		out[k] = string(v)
	}
	for k, v := range cm.Data {
		out[k] = v
	}
	return out, true, nil
}

var _ DataLookup = cacheLookup{}
