package benchkit

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	pgclient "github.com/pgloop/pgloop/pkg/generated/clientset/versioned"
	"github.com/pgloop/pgloop/test/testbed"
)

// Ms rounds a duration for display.
func Ms(d time.Duration) time.Duration {
	if d > 10*time.Second || d < -10*time.Second {
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Millisecond)
}

// Loadavg returns the first three fields of /proc/loadavg.
func Loadavg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// Revision is the git revision of the tree at repo, "+dirty" when pkg/ or
// cmd/ have changes.
func Revision(ctx context.Context, repo string) string {
	out, err := exec.CommandContext(ctx, "git", "-C", repo, "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	rev := strings.TrimSpace(string(out))
	status, err := exec.CommandContext(ctx, "git", "-C", repo, "status", "--porcelain", "--untracked-files=no", "--", "pkg", "cmd").Output()
	if err == nil && len(strings.TrimSpace(string(status))) > 0 {
		rev += "+dirty"
	}
	return rev
}

// Clients returns a bench's clients of the plane at rc: fast, so that its
// creations never queue behind a client-side limit.
func Clients(rc *rest.Config) (*rest.Config, kubernetes.Interface, pgclient.Interface, error) {
	rc = rest.CopyConfig(rc)
	rc.QPS, rc.Burst = 1000, 2000
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, nil, nil, err
	}
	pg, err := pgclient.NewForConfig(rc)
	if err != nil {
		return nil, nil, nil, err
	}
	return rc, kube, pg, nil
}

// ApplyCRDs applies the CustomResourceDefinitions of repo's manifests/crds.
func ApplyCRDs(ctx context.Context, rc *rest.Config, repo string) error {
	crds, err := testbed.ReadManifests(filepath.Join(repo, "manifests", "crds"))
	if err != nil {
		return fmt.Errorf("while reading the CRDs: %w", err)
	}
	crds = slices.DeleteFunc(crds, func(o *unstructured.Unstructured) bool { return o.GetKind() != "CustomResourceDefinition" })
	if len(crds) == 0 {
		return errors.New("no CustomResourceDefinition in manifests/crds")
	}
	if err := testbed.Apply(ctx, rc, crds); err != nil {
		return fmt.Errorf("while applying the CRDs: %w", err)
	}
	return nil
}
