package cluster

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// TestTLSMounts: spec.tls mounts its Secrets into the Spilo and pooler
// containers as zalando does, names the files in their variables, and is
// a change of the pod templates (a rollout); without it nothing changes
// (the golden tests).
func TestTLSMounts(t *testing.T) {
	pg := withPooler(t, false)
	before := StatefulSet(pg, Options{})
	beforePooler := PoolerDeployment(pg, RoleMaster, Options{})
	pg.Spec.TLS = &v1.TLS{SecretName: "db-tls", CAFile: "ca.crt", CASecretName: "db-ca"}
	sts := StatefulSet(pg, Options{})
	d := PoolerDeployment(pg, RoleMaster, Options{})
	if PodTemplateHash(&sts.Spec.Template) == PodTemplateHash(&before.Spec.Template) {
		t.Errorf("the StatefulSet's template hash did not change with spec.tls")
	}
	if PodTemplateHash(&d.Spec.Template) == PodTemplateHash(&beforePooler.Spec.Template) {
		t.Errorf("the pooler's template hash did not change with spec.tls")
	}
	for _, c := range []struct {
		what string
		spec corev1.PodSpec
		env  map[string]string
	}{
		{"statefulset", sts.Spec.Template.Spec, map[string]string{
			"SSL_CERTIFICATE_FILE": "/tls/tls.crt", "SSL_PRIVATE_KEY_FILE": "/tls/tls.key", "SSL_CA_FILE": "/tlsca/ca.crt"}},
		{"pooler", d.Spec.Template.Spec, map[string]string{
			"CONNECTION_POOLER_CLIENT_TLS_CRT": "/tls/tls.crt", "CONNECTION_POOLER_CLIENT_TLS_KEY": "/tls/tls.key",
			"CONNECTION_POOLER_CLIENT_CA_FILE": "/tlsca/ca.crt"}},
	} {
		vols := map[string]string{}
		for _, v := range c.spec.Volumes {
			if v.Secret != nil {
				if v.Secret.DefaultMode == nil || *v.Secret.DefaultMode != 0o640 {
					t.Errorf("%s: volume %s mode %v, want 0640", c.what, v.Name, v.Secret.DefaultMode)
				}
				vols[v.Name] = v.Secret.SecretName
			}
		}
		if vols[tlsVolumeName] != "db-tls" || vols[tlsCAVolumeName] != "db-ca" {
			t.Errorf("%s: secret volumes %v", c.what, vols)
		}
		ctr := c.spec.Containers[0]
		mounts := map[string]string{}
		for _, m := range ctr.VolumeMounts {
			mounts[m.Name] = m.MountPath
		}
		if mounts[tlsVolumeName] != "/tls" || mounts[tlsCAVolumeName] != "/tlsca" {
			t.Errorf("%s: mounts %v", c.what, mounts)
		}
		env := envOf(ctr)
		for k, v := range c.env {
			if env[k].Value != v {
				t.Errorf("%s: %s=%q, want %q", c.what, k, env[k].Value, v)
			}
		}
		if sc := c.spec.SecurityContext; sc == nil || sc.FSGroup == nil || *sc.FSGroup != spiloGID {
			t.Errorf("%s: fsGroup %+v, want %d", c.what, sc, spiloGID)
		}
	}
	if beforePooler.Spec.Template.Spec.SecurityContext != nil {
		t.Errorf("pooler without spec.tls: securityContext %+v, want none (as before)", beforePooler.Spec.Template.Spec.SecurityContext)
	}
}
