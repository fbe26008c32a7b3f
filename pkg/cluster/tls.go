package cluster

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// Names of spec.tls's volumes in the pods.
const (
	tlsVolumeName   = "tls-secret"
	tlsCAVolumeName = "tls-ca-secret"
)

// tlsFileMode is the mode of spec.tls's files, as zalando mounts them:
// readable by the owner (root) and the pod's fsGroup (Spilo's postgres
// group), which PostgreSQL accepts for a private key owned by root.
const tlsFileMode = int32(0o640)

// Environment variables that name spec.tls's files: Spilo's for
// PostgreSQL, and the ones zalando's PgBouncer image reads for its clients.
var (
	spiloTLSEnv  = [3]string{"SSL_CERTIFICATE_FILE", "SSL_PRIVATE_KEY_FILE", "SSL_CA_FILE"}
	poolerTLSEnv = [3]string{"CONNECTION_POOLER_CLIENT_TLS_CRT", "CONNECTION_POOLER_CLIENT_TLS_KEY", "CONNECTION_POOLER_CLIENT_CA_FILE"}
)

// tlsMounts returns what spec.tls adds to a container and its pod, as
// zalando does (k8sres.go's generateTlsMounts): the Secret at /tls, the CA
// Secret at /tlsca when caSecretName is set, both with mode 0640, and the
// variables names gives that point at the certificate, the key and the CA
// file (when caFile is set). Nothing without spec.tls.
func tlsMounts(pg *v1.Postgresql, names [3]string) (env []corev1.EnvVar, volumes []corev1.Volume, mounts []corev1.VolumeMount) {
	t := pg.Spec.TLS
	if t == nil {
		return nil, nil, nil
	}
	secretVolume := func(name, secret string) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: secret, DefaultMode: ptr.To(tlsFileMode)}}}
	}
	volumes = append(volumes, secretVolume(tlsVolumeName, t.SecretName))
	mounts = append(mounts, corev1.VolumeMount{Name: tlsVolumeName, MountPath: v1.TLSMountPath, ReadOnly: true})
	env = append(env,
		corev1.EnvVar{Name: names[0], Value: t.CertificatePath()},
		corev1.EnvVar{Name: names[1], Value: t.PrivateKeyPath()})
	if ca := t.CAPath(); ca != "" {
		env = append(env, corev1.EnvVar{Name: names[2], Value: ca})
		if t.CASecretName != "" {
			volumes = append(volumes, secretVolume(tlsCAVolumeName, t.CASecretName))
			mounts = append(mounts, corev1.VolumeMount{Name: tlsCAVolumeName, MountPath: v1.TLSCAMountPath, ReadOnly: true})
		}
	}
	return env, volumes, mounts
}
