package e2e

// The operator as a Deployment (issue 33): manifests/operator built with
// kustomize's Go library, as `kubectl apply -k` would, patched for this
// plane by the test only, and applied. Its pods run on the real node when
// the plane has one, as containers of pgloop's image built from this tree
// (LoadOperatorImage) that reach the apiserver through the `kubernetes`
// Service; else on the process node, whose kubelet runs the image's binary
// (test/kubelet, image.go). Helpers for other tests: DeployOperator and the
// methods of OperatorDeployment.

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	kusttypes "sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/pgloop/pgloop/test/pgtest"
	"github.com/pgloop/pgloop/test/testbed"
)

const (
	// OperatorImage is the repository of pgloop's image, as
	// manifests/operator names it: on the real node an image of the
	// operator binary built from this tree (LoadOperatorImage); the process
	// node maps it to that binary (main_test.go).
	OperatorImage = "ghcr.io/pgloop/pgloop"
	// operatorName is the Deployment's, the ServiceAccount's and the
	// Lease's name in manifests/operator.
	operatorName = "pgloop-operator"
	// operatorContainer is the Deployment's container.
	operatorContainer = "operator"
	// operatorHTTPPort is the container's port named http.
	operatorHTTPPort = 8080
)

// OperatorOptions say how DeployOperator patches manifests/operator.
type OperatorOptions struct {
	// Replicas; 0 keeps the manifests' (2).
	Replicas int32
	// Namespaces are the only ones the operator manages (PGLOOP_NAMESPACE):
	// tests share the plane, an operator must not touch other tests'
	// clusters. Required.
	Namespaces []string
	// Tag is the image's tag; empty keeps the manifests' (latest). Every
	// tag of OperatorImage runs the same binary unless the plane maps an
	// exact reference to another.
	Tag string
	// Args are appended to the container's args (a later flag wins).
	Args []string
	// RealNode places the pods on the plane's real node; else they run on
	// the process node. DeployOperator sets it when the plane has one.
	RealNode bool
}

// OperatorDeployment is manifests/operator applied in a namespace of its
// own, its pods on the real node or the process node.
type OperatorDeployment struct {
	// Namespace holds the Deployment, its ServiceAccount, its Role and the
	// Lease; it is the test's, deleted when the test ends.
	Namespace string
	// Name is the Deployment's (and the Lease's) name.
	Name string
	// ClusterRole names the ClusterRole and its binding, suffixed with
	// Namespace so that deployments side by side keep their own.
	ClusterRole string
	// Objects are what was applied (the CRD is left out: the suites
	// share it).
	Objects []*unstructured.Unstructured

	e    *Env
	opts OperatorOptions
}

// imageBinaryMu guards the operator's image: the copy of the binary to
// where the plane maps OperatorImage, its load into the real node.
var imageBinaryMu sync.Mutex

// operatorTags are the tags of OperatorImage that run the operator built
// from this tree: the manifests' and those the suites deploy.
var operatorTags = []string{"latest", "rolled", "v1"}

// installOperatorImage makes OperatorImage's tags run the operator built
// from this tree: on the real node its image, loaded once; without one,
// its binary where the process node looks for OperatorImage's.
func (e *Env) installOperatorImage(t testing.TB) {
	t.Helper()
	bin := e.operatorBinary(t)
	imageBinaryMu.Lock()
	defer imageBinaryMu.Unlock()
	if len(e.Plane.RealNodes()) > 0 {
		if e.operatorImageLoaded {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		began := time.Now()
		if err := e.LoadOperatorImage(ctx, bin, "e2e", operatorTags...); err != nil {
			t.Fatal(err)
		}
		t.Logf("the operator's image built and loaded into the real node in %v", time.Since(began).Round(time.Millisecond))
		e.operatorImageLoaded = true
		return
	}
	dst, ok := e.Plane.ImageBinaries()[OperatorImage]
	if !ok {
		t.Fatalf("the plane maps no binary to %s (testbed.Options.ImageBinaries)", OperatorImage)
	}
	if _, err := os.Stat(dst); err == nil {
		return
	}
	if err := copyFile(bin, dst, 0o755); err != nil {
		t.Fatalf("while installing the operator image's binary: %v", err)
	}
}

// LoadOperatorImage builds pgloop's operator image from bin (a static
// linux/amd64 build) with hack/release's image command, as `make image`
// does, and loads it into the real node as OperatorImage:version and
// OperatorImage:tag of each of tags.
func (e *Env) LoadOperatorImage(ctx context.Context, bin, version string, tags ...string) error {
	dir, err := os.MkdirTemp("", "pgloop-e2e-operator-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	archive := filepath.Join(dir, "pgloop-image.tar")
	cmd := exec.CommandContext(ctx, pgtest.GoCommand(), "run", "./image", "-out", archive, "-version", version, "-bin", "linux/amd64="+bin)
	cmd.Dir = filepath.Join(e.Repo, "hack", "release")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building the operator's image (hack/release/image): %w\n%s", err, out)
	}
	var refs []string
	for _, tag := range tags {
		refs = append(refs, OperatorImage+":"+tag)
	}
	return e.Plane.LoadImage(ctx, archive, OperatorImage, refs...)
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	tmp := dst + ".tmp"
	out, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}

// BuildOperatorManifests runs kustomize on manifests/operator with an
// overlay that puts it in namespace, tolerates the real node's or the
// process node's taint and selects that node, confines the operator to opts.Namespaces, and sets the
// replicas, the tag and the args of opts. It returns the objects, the CRD
// included.
func BuildOperatorManifests(repo, namespace string, opts OperatorOptions) ([]*unstructured.Unstructured, error) {
	fs := filesys.MakeFsInMemory()
	// The overlay refers to the base by its absolute path on disk: an
	// in-memory file system cannot hold it, so the base is copied in.
	base := filepath.Join(repo, "manifests")
	for _, dir := range []string{"operator", "crds"} {
		entries, err := os.ReadDir(filepath.Join(base, dir))
		if err != nil {
			return nil, err
		}
		for _, ent := range entries {
			if ent.IsDir() {
				continue
			}
			data, err := os.ReadFile(filepath.Join(base, dir, ent.Name()))
			if err != nil {
				return nil, err
			}
			if err := fs.WriteFile(filepath.Join("/manifests", dir, ent.Name()), data); err != nil {
				return nil, err
			}
		}
	}
	env := []map[string]any{{"name": "PGLOOP_NAMESPACE", "value": strings.Join(opts.Namespaces, ",")}}
	toleration, node := testbed.DataPlaneToleration(), testbed.ProcessNodeLabelValue
	if opts.RealNode {
		toleration, node = testbed.RealNodeToleration(), testbed.RealNodeLabelValue
	}
	template := map[string]any{
		"spec": map[string]any{
			"tolerations":  []any{toleration},
			"nodeSelector": map[string]string{testbed.NodeLabel: node},
			"containers":   []any{map[string]any{"name": operatorContainer, "env": env}},
		},
	}
	patch := map[string]any{
		"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"name": operatorName, "namespace": "pgloop-system"},
		"spec":     map[string]any{"template": template},
	}
	patchYAML, err := yaml.Marshal(patch)
	if err != nil {
		return nil, err
	}
	k := kusttypes.Kustomization{
		TypeMeta:  kusttypes.TypeMeta{APIVersion: kusttypes.KustomizationVersion, Kind: kusttypes.KustomizationKind},
		Resources: []string{"../manifests/operator"},
		Namespace: namespace,
		Patches:   []kusttypes.Patch{{Patch: string(patchYAML)}},
	}
	if opts.Replicas > 0 {
		k.Replicas = []kusttypes.Replica{{Name: operatorName, Count: int64(opts.Replicas)}}
	}
	if opts.Tag != "" {
		k.Images = []kusttypes.Image{{Name: OperatorImage, NewTag: opts.Tag}}
	}
	kYAML, err := yaml.Marshal(k)
	if err != nil {
		return nil, err
	}
	if err := fs.WriteFile("/overlay/kustomization.yaml", kYAML); err != nil {
		return nil, err
	}
	objs, err := testbed.KustomizeFS(fs, "/overlay")
	if err != nil {
		return nil, fmt.Errorf("manifests/operator: %w", err)
	}
	var out []*unstructured.Unstructured
	for _, u := range objs {
		switch u.GetKind() {
		case "Namespace":
			continue // the test's own
		case "ClusterRole", "ClusterRoleBinding":
			u.SetName(u.GetName() + "-" + namespace)
			if u.GetKind() == "ClusterRoleBinding" {
				if err := unstructured.SetNestedField(u.Object, operatorName+"-"+namespace, "roleRef", "name"); err != nil {
					return nil, err
				}
			}
		case "Deployment":
			if len(opts.Args) > 0 {
				if err := appendArgs(u, opts.Args); err != nil {
					return nil, err
				}
			}
		}
		out = append(out, u)
	}
	return out, nil
}

// appendArgs appends args to the operator container's.
func appendArgs(u *unstructured.Unstructured, args []string) error {
	containers, _, err := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
	if err != nil {
		return err
	}
	for i, c := range containers {
		cm := c.(map[string]any)
		if cm["name"] != operatorContainer {
			continue
		}
		old, _, _ := unstructured.NestedStringSlice(cm, "args")
		all := make([]any, 0, len(old)+len(args))
		for _, a := range append(old, args...) {
			all = append(all, a)
		}
		cm["args"] = all
		containers[i] = cm
	}
	return unstructured.SetNestedSlice(u.Object, containers, "spec", "template", "spec", "containers")
}

// DeployOperator applies manifests/operator (BuildOperatorManifests) in a
// new namespace of t's, with server-side apply, and returns once the
// Deployment is rolled out: every replica Ready on the process node. When
// t ends, the clusters of opts.Namespaces are deleted while the operator
// still runs (their finalizers), then what was applied but the CRD.
func (e *Env) DeployOperator(t testing.TB, opts OperatorOptions) *OperatorDeployment {
	t.Helper()
	if len(opts.Namespaces) == 0 {
		t.Fatal("DeployOperator: no namespaces to manage")
	}
	e.installOperatorImage(t)
	opts.RealNode = len(e.Plane.RealNodes()) > 0
	ns := e.Namespace(t)
	objs, err := BuildOperatorManifests(e.Repo, ns, opts)
	if err != nil {
		t.Fatal(err)
	}
	d := &OperatorDeployment{Namespace: ns, Name: operatorName, ClusterRole: operatorName + "-" + ns, e: e, opts: opts}
	for _, o := range objs {
		if o.GetKind() != "CustomResourceDefinition" {
			d.Objects = append(d.Objects, o)
		}
	}
	// Registered before the apply: a half-applied deployment is removed
	// too. Cleanups run last first: this one after the clusters' below.
	t.Cleanup(func() { d.delete(t) })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := testbed.Apply(ctx, e.Plane.Config, objs); err != nil {
		t.Fatalf("while applying manifests/operator: %v", err)
	}
	t.Cleanup(func() {
		for _, cns := range opts.Namespaces {
			d.deleteClusters(t, cns)
		}
		if t.Failed() {
			d.logTails(t, 40)
		}
	})
	rctx, rcancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer rcancel()
	if err := d.WaitRollout(rctx); err != nil {
		t.Fatal(err)
	}
	return d
}

// delete removes what DeployOperator applied but the CRD, the
// cluster-scoped objects by name (the namespace goes with the test).
func (d *OperatorDeployment) delete(t testing.TB) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, o := range slices.Backward(d.Objects) {
		gvr, ok := objectResources[o.GetKind()]
		if !ok {
			t.Errorf("cleanup: no resource known for kind %s", o.GetKind())
			continue
		}
		var err error
		if o.GetNamespace() == "" {
			err = d.e.Dyn.Resource(gvr).Delete(ctx, o.GetName(), metav1.DeleteOptions{})
		} else {
			err = d.e.Dyn.Resource(gvr).Namespace(o.GetNamespace()).Delete(ctx, o.GetName(), metav1.DeleteOptions{})
		}
		if IgnoreNotFound(err) != nil {
			t.Errorf("cleanup: while deleting %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
}

// objectResources are the resources of the kinds manifests/operator holds.
var objectResources = map[string]schema.GroupVersionResource{
	"ServiceAccount":     {Version: "v1", Resource: "serviceaccounts"},
	"ClusterRole":        {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"},
	"ClusterRoleBinding": {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"},
	"Role":               {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"},
	"RoleBinding":        {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"},
	"Deployment":         {Group: "apps", Version: "v1", Resource: "deployments"},
}

// deleteClusters deletes the clusters of namespace and waits until they
// are gone; those left after cleanupDeadline lose their finalizers.
func (d *OperatorDeployment) deleteClusters(t testing.TB, namespace string) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupDeadline)
	defer cancel()
	list, err := d.e.PG.Postgresqls(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Errorf("cleanup: while listing the clusters of %s: %v", namespace, err)
		return
	}
	for _, pg := range list.Items {
		if err := d.e.PG.Postgresqls(namespace).Delete(ctx, pg.Name, metav1.DeleteOptions{}); IgnoreNotFound(err) != nil {
			t.Errorf("cleanup: while deleting cluster %s/%s: %v", namespace, pg.Name, err)
		}
	}
	for _, pg := range list.Items {
		if err := d.e.WaitGone(ctx, namespace, pg.Name); err != nil {
			t.Errorf("cleanup: %v", err)
			d.e.dropFinalizers(t, namespace, pg.Name)
		}
	}
}

// logTails logs the last lines of every pod's log.
func (d *OperatorDeployment) logTails(t testing.TB, n int) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pods, err := d.Pods(ctx)
	if err != nil {
		t.Logf("operator pods: %v", err)
		return
	}
	for _, p := range pods {
		log, err := d.Log(p)
		if err != nil {
			t.Logf("operator pod %s: %v", p.Name, err)
			continue
		}
		t.Logf("--- last lines of operator pod %s on %s ---\n%s", p.Name, p.Spec.NodeName, lastN(log, n))
	}
}

// Selector selects the operator's pods.
func (d *OperatorDeployment) Selector() map[string]string {
	return map[string]string{"app.kubernetes.io/name": "pgloop", "app.kubernetes.io/component": "operator"}
}

// Pods lists the Deployment's pods, by name.
func (d *OperatorDeployment) Pods(ctx context.Context) ([]*corev1.Pod, error) {
	list, err := d.e.Kube.CoreV1().Pods(d.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(d.Selector()).String(),
	})
	if err != nil {
		return nil, err
	}
	out := make([]*corev1.Pod, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, &list.Items[i])
	}
	slices.SortFunc(out, func(a, b *corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// WaitPods waits until cond holds for the Deployment's pods (a watch, under
// ctx) and returns them.
func (d *OperatorDeployment) WaitPods(ctx context.Context, cond func([]*corev1.Pod) bool) ([]*corev1.Pod, error) {
	return d.e.WaitPodsSelected(ctx, d.Namespace, d.Selector(), cond)
}

// Deployment reads the Deployment.
func (d *OperatorDeployment) Deployment(ctx context.Context) (*appsv1.Deployment, error) {
	return d.e.Kube.AppsV1().Deployments(d.Namespace).Get(ctx, d.Name, metav1.GetOptions{})
}

// RolledOut is kubectl rollout status's test: the Deployment's controller
// has seen its latest spec, every replica is updated and available, and
// no old one is left.
func RolledOut(dep *appsv1.Deployment) bool {
	want := int32(1)
	if dep.Spec.Replicas != nil {
		want = *dep.Spec.Replicas
	}
	s := dep.Status
	return s.ObservedGeneration >= dep.Generation && s.UpdatedReplicas == want && s.Replicas == want &&
		s.AvailableReplicas == want && s.ReadyReplicas == want
}

// WaitRollout waits until the Deployment is rolled out (RolledOut) and its
// pods, one per replica, are all Running and Ready with the Deployment's
// latest template.
func (d *OperatorDeployment) WaitRollout(ctx context.Context) error {
	dep, err := testbed.WaitFor(ctx, testbed.ListWatch(d.e.Kube.AppsV1().Deployments(d.Namespace), ByName(d.Name)),
		func(dep *appsv1.Deployment) (bool, error) { return RolledOut(dep), nil })
	if err != nil {
		return fmt.Errorf("while waiting for deployment %s/%s to roll out: %w%s", d.Namespace, d.Name, err, d.describePods())
	}
	want := int(*dep.Spec.Replicas)
	_, err = d.WaitPods(ctx, func(pods []*corev1.Pod) bool {
		live := slices.DeleteFunc(slices.Clone(pods), func(p *corev1.Pod) bool { return p.DeletionTimestamp != nil })
		return len(pods) == want && len(live) == want && ReadyPods(want)(live)
	})
	if err != nil {
		return fmt.Errorf("while waiting for the pods of deployment %s/%s: %w%s", d.Namespace, d.Name, err, d.describePods())
	}
	return nil
}

func (d *OperatorDeployment) describePods() string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	pods, err := d.Pods(ctx)
	if err != nil {
		return ""
	}
	return "\npods:\n" + DescribePods(pods)
}

// update changes the Deployment's pod template, retrying on conflicts.
func (d *OperatorDeployment) update(ctx context.Context, change func(*corev1.Container)) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		dep, err := d.Deployment(ctx)
		if err != nil {
			return err
		}
		for i := range dep.Spec.Template.Spec.Containers {
			if c := &dep.Spec.Template.Spec.Containers[i]; c.Name == operatorContainer {
				change(c)
			}
		}
		_, err = d.e.Kube.AppsV1().Deployments(d.Namespace).Update(ctx, dep, metav1.UpdateOptions{})
		return err
	})
}

// SetImage changes the container's image: a rolling update. Wait for it
// with WaitRollout.
func (d *OperatorDeployment) SetImage(ctx context.Context, image string) error {
	return d.update(ctx, func(c *corev1.Container) { c.Image = image })
}

// SetArgs replaces the container's args: a rolling update.
func (d *OperatorDeployment) SetArgs(ctx context.Context, args []string) error {
	return d.update(ctx, func(c *corev1.Container) { c.Args = slices.Clone(args) })
}

// Lease reads the leader election Lease.
func (d *OperatorDeployment) Lease(ctx context.Context) (*coordinationv1.Lease, error) {
	return d.e.Kube.CoordinationV1().Leases(d.Namespace).Get(ctx, d.Name, metav1.GetOptions{})
}

// HolderPod is the pod an identity in the Lease names: pgloop's identity
// is its hostname, the pod's name, then "_" and a random suffix.
func HolderPod(identity string) string {
	name, _, _ := strings.Cut(identity, "_")
	return name
}

// WaitLeader waits until the Lease is held by an identity other than
// notIdentity ("" for any) whose pod is one of the Deployment's, and
// returns the identity and that pod.
func (d *OperatorDeployment) WaitLeader(ctx context.Context, notIdentity string) (string, *corev1.Pod, error) {
	lease, err := testbed.WaitFor(ctx, testbed.ListWatch(d.e.Kube.CoordinationV1().Leases(d.Namespace), ByName(d.Name)),
		func(l *coordinationv1.Lease) (bool, error) {
			id := ""
			if l.Spec.HolderIdentity != nil {
				id = *l.Spec.HolderIdentity
			}
			return id != "" && id != notIdentity, nil
		})
	if err != nil {
		return "", nil, fmt.Errorf("while waiting for a leader other than %q: %w", notIdentity, err)
	}
	id := *lease.Spec.HolderIdentity
	pods, err := d.Pods(ctx)
	if err != nil {
		return "", nil, err
	}
	for _, p := range pods {
		if p.Name == HolderPod(id) {
			return id, p, nil
		}
	}
	return "", nil, fmt.Errorf("the Lease's holder %q is none of the pods:\n%s", id, DescribePods(pods))
}

// Metrics reads /metrics at the pod's IP, where the process kubelet has
// pgloop serve it (docs/testbed.md).
func (d *OperatorDeployment) Metrics(ctx context.Context, pod *corev1.Pod) (string, error) {
	if pod.Status.PodIP == "" {
		return "", fmt.Errorf("pod %s has no IP", pod.Name)
	}
	url := fmt.Sprintf("http://%s:%d/metrics", pod.Status.PodIP, operatorHTTPPort)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	client := &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return string(body), nil
}

// Log reads the operator container's log: every run of it (the process
// kubelet appends them to one file), or on the real node the previous
// run's and the current one's (`kubectl logs --previous`, then `logs`).
func (d *OperatorDeployment) Log(pod *corev1.Pod) (string, error) {
	for _, n := range d.e.Plane.ProcessNodes() {
		if n.Name == pod.Spec.NodeName {
			b, err := os.ReadFile(filepath.Join(n.Root, "pods", string(pod.UID), operatorContainer+".log"))
			return string(b), err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return d.e.PodLog(ctx, pod, operatorContainer)
}

// ContainerPID is the host PID of the operator container's process: from
// its container ID on the process node (process://<pid>, the process
// kubelet's), from containerd on the real node.
func (e *Env) ContainerPID(ctx context.Context, pod *corev1.Pod) (int, error) {
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name != operatorContainer || cs.State.Running == nil {
			continue
		}
		if pid, ok := strings.CutPrefix(cs.ContainerID, "process://"); ok {
			return strconv.Atoi(pid)
		}
		for _, n := range e.Plane.RealNodes() {
			if n.Name == pod.Spec.NodeName {
				first, _, err := n.ContainerProcesses(ctx, cs.ContainerID)
				return first, err
			}
		}
	}
	return 0, fmt.Errorf("pod %s has no running operator container with a process ID", pod.Name)
}

// RestartCount is the operator container's restart count.
func RestartCount(pod *corev1.Pod) int32 {
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == operatorContainer {
			return cs.RestartCount
		}
	}
	return 0
}

// WaitPod waits until cond holds for pod uid.
func (d *OperatorDeployment) WaitPod(ctx context.Context, uid types.UID, cond func(*corev1.Pod) bool) (*corev1.Pod, error) {
	var found *corev1.Pod
	_, err := d.WaitPods(ctx, func(pods []*corev1.Pod) bool {
		for _, p := range pods {
			if p.UID == uid && cond(p) {
				found = p
				return true
			}
		}
		return false
	})
	if err != nil {
		return nil, err
	}
	return found, nil
}
