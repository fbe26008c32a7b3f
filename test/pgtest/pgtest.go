// Package pgtest holds what the end-to-end suites and the benchmarks share
// about pgloop itself: a small valid cluster and one on the process node,
// the repository's root, and the `pgloop operator` subprocess (operator.go).
package pgtest

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/test/testbed"
)

// Cluster returns a small valid cluster: team acid, PostgreSQL 17, a 1Gi
// volume, small requests so many fit on the plane's nodes, and no users nor
// databases (WithApp adds them).
func Cluster(ns, name string, instances int32) *v1.Postgresql {
	cpu, mem := resource.MustParse("10m"), resource.MustParse("32Mi")
	cpuLimit, memLimit := resource.MustParse("500m"), resource.MustParse("256Mi")
	return &v1.Postgresql{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1.SchemeGroupVersion.String(), Kind: v1.PostgresqlKind},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1.PostgresqlSpec{
			TeamID:            "acid",
			NumberOfInstances: instances,
			PostgreSQL:        v1.PostgresqlParam{Version: "17"},
			Volume:            v1.Volume{Size: resource.MustParse("1Gi")},
			Resources: &v1.Resources{
				Requests: &v1.ResourceDescription{CPU: &cpu, Memory: &mem},
				Limits:   &v1.ResourceDescription{CPU: &cpuLimit, Memory: &memLimit},
			},
		},
	}
}

// WithApp adds a user app (createdb) owning a database appdb, as the
// zalando operator's minimal manifest has. A cluster on KWOK's nodes must
// not have them: no PostgreSQL runs there to make them, and pgloop does not
// call a cluster Running before they exist.
func WithApp(pg *v1.Postgresql) {
	pg.Spec.Users = map[string]v1.UserFlags{"app": {v1.FlagCreateDB}}
	pg.Spec.Databases = map[string]string{"appdb": "app"}
}

// OnProcessNode makes a cluster run on the plane's process node
// (docs/testbed.md, "Data plane"): PostgreSQL 15 (the version Debian
// ships), tolerating the node's taint and required there, with Patroni
// timings shortened for tests (a failover takes about ttl) and replicas
// retrying the primary every second.
func OnProcessNode(pg *v1.Postgresql) {
	pg.Spec.PostgreSQL.Version = "15"
	pg.Spec.PostgreSQL.Parameters = map[string]string{"wal_retrieve_retry_interval": "1s"}
	pg.Spec.Patroni = &v1.Patroni{TTL: 20, LoopWait: 2, RetryTimeout: 5}
	pg.Spec.Tolerations = []corev1.Toleration{testbed.DataPlaneToleration()}
	pg.Spec.NodeAffinity = &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
				Key:      testbed.NodeLabel,
				Operator: corev1.NodeSelectorOpIn,
				Values:   []string{testbed.ProcessNodeLabelValue},
			}}}},
		},
	}
}

// OnRealNode makes a cluster run on the plane's real node (docs/testbed.md,
// "Real node"): as OnProcessNode, tolerating and required on the real
// node instead, its volumes of the real node's class (local volumes).
func OnRealNode(pg *v1.Postgresql) {
	OnProcessNode(pg)
	pg.Spec.Tolerations = []corev1.Toleration{testbed.RealNodeToleration()}
	pg.Spec.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions[0].Values =
		[]string{testbed.RealNodeLabelValue}
	pg.Spec.Volume.StorageClass = testbed.RealStorageClassName
}

// RepoRoot walks up from the working directory to pgloop's go.mod.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.HasPrefix(bytes.TrimSpace(data), []byte("module github.com/pgloop/pgloop\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no pgloop repository above the working directory")
		}
		dir = parent
	}
}
