// Command testbed runs the local control plane in the foreground, for
// `make plane` and `make run`; Ctrl-C stops it and everything it started.
//
//	testbed up [--nodes N] [--kubeconfig-out PATH] [--crds DIR] [--apply PATH]... [--apply-kustomize DIR]... [--image-binary REF=PATH]... [--keep-dir] [--volume-workers W] [--kwok-pod-delete] [--object-store] [--object-store-secret NS/NAME] [--object-store-settings NS/NAME]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/pgloop/pgloop/test/testbed"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "testbed:", err)
		}
		stop()
		os.Exit(1)
	}
}

// config is what `testbed up` was asked for.
type config struct {
	nodes         int
	kubeconfigOut string
	crds          string
	apply         []string
	kustomize     []string
	images        map[string]string
	keepDir       bool
	processNodes  int
	taint         bool
	volumeWorkers int
	noResizer     bool
	resizeFSDelay time.Duration
	kwokPodDelete bool
	realNodes     int
	imageAliases  map[string]string
	objectStore   bool
	storeSecret   string
	storeSettings string
}

const usage = `usage: testbed up [flags]
       testbed check-real-node

Starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok
on 127.0.0.1 with fake nodes, and runs until interrupted. Process nodes
(--process-nodes) run real Patroni and PostgreSQL for the pods bound to them.
A real node (--real-nodes 1: a kubelet on containerd, as root) runs its pods
as containers of the images "make images" builds; check-real-node says
whether this machine can run one, and if not why.
`

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 1 && args[0] == "check-real-node" {
		// make run asks before it starts a plane with a real node.
		if err := testbed.RealNodeUnsupported(); err != nil {
			return err
		}
		fmt.Fprintln(stdout, "this machine can run a real node")
		return nil
	}
	if len(args) == 0 || args[0] != "up" {
		fmt.Fprint(stderr, usage)
		return errors.New(`expected the "up" or "check-real-node" subcommand`)
	}
	var cfg config
	fs := flag.NewFlagSet("testbed up", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usage+"\nFlags:\n")
		fs.PrintDefaults()
	}
	fs.IntVar(&cfg.nodes, "nodes", 3, "number of fake nodes played by kwok")
	fs.IntVar(&cfg.processNodes, "process-nodes", 0, "number of nodes played by process kubelets (bin/pgkubelet): their pods run real Patroni and PostgreSQL")
	fs.IntVar(&cfg.realNodes, "real-nodes", 0, "number of real nodes (0 or 1): a kubelet and kube-proxy on Debian's containerd, pods as containers of the images of `make images`, cluster DNS; needs root and `make real-node-deps`")
	fs.Func("image-alias", "ALIAS=REF: the real node also names the image REF (one it loads) ALIAS, e.g. zalando's Spilo reference (repeatable)", func(s string) error {
		alias, ref, ok := strings.Cut(s, "=")
		if !ok || alias == "" || ref == "" {
			return fmt.Errorf("%q: want ALIAS=REF", s)
		}
		if cfg.imageAliases == nil {
			cfg.imageAliases = map[string]string{}
		}
		cfg.imageAliases[alias] = ref
		return nil
	})
	fs.BoolVar(&cfg.taint, "taint-process-nodes", false, "taint process nodes "+testbed.DataPlaneTaintKey+"="+testbed.DataPlaneTaintValue+":NoSchedule")
	fs.StringVar(&cfg.kubeconfigOut, "kubeconfig-out", "", "also write the admin kubeconfig here once the plane is ready, and remove it on exit")
	fs.StringVar(&cfg.crds, "crds", "", "apply the CustomResourceDefinitions in this directory and wait until they are Established")
	fs.Func("apply", "apply the manifests in this file or directory after the CRDs (repeatable)", func(s string) error {
		cfg.apply = append(cfg.apply, s)
		return nil
	})
	fs.Func("apply-kustomize", "apply the kustomization in this directory (kubectl apply -k) after the other manifests (repeatable)", func(s string) error {
		cfg.kustomize = append(cfg.kustomize, s)
		return nil
	})
	fs.Func("image-binary", "REF=PATH: process nodes run containers of image REF (a repository: any tag; an exact reference wins) with the binary at PATH as the image's entrypoint (repeatable)", func(s string) error {
		ref, path, ok := strings.Cut(s, "=")
		if !ok || ref == "" || path == "" {
			return fmt.Errorf("%q: want REF=PATH", s)
		}
		abs, err := filepath.Abs(path)
		if err != nil {
			return err
		}
		if cfg.images == nil {
			cfg.images = map[string]string{}
		}
		cfg.images[ref] = abs
		return nil
	})
	fs.BoolVar(&cfg.keepDir, "keep-dir", false, "keep the plane's directory (etcd data, logs) on exit")
	fs.IntVar(&cfg.volumeWorkers, "volume-workers", 0, "make volumes with the plane's provisioner (test/provisioner) and this many workers instead of kwok's one-at-a-time volume stages (0: kwok's)")
	fs.BoolVar(&cfg.noResizer, "no-resizer", false, "run without the plane's volume resizer (test/resizer): a claim's larger request then never grows it")
	fs.DurationVar(&cfg.resizeFSDelay, "resize-fs-delay", testbed.DefaultResizeFSDelay, "how long the resizer leaves a grown claim FileSystemResizePending")
	fs.BoolVar(&cfg.kwokPodDelete, "kwok-pod-delete", false, "keep kwok's pod-delete stage, which deletes by name and may delete a StatefulSet's new pod, instead of the plane's pod reaper (test/podreaper), to compare")
	fs.BoolVar(&cfg.objectStore, "object-store", false, "also run an S3 object store (SeaweedFS, HTTPS, bucket "+testbed.DefaultBucket+"); what a client needs is printed and, with --kubeconfig-out, written beside it as s3.env and s3.json")
	fs.StringVar(&cfg.storeSecret, "object-store-secret", "", "with --object-store, a Secret NAMESPACE/NAME holding the store's "+
		"AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and ca.crt, the keys a backup repository's Secret has (pgloop's --backup-s3-secret)")
	fs.StringVar(&cfg.storeSettings, "object-store-settings", "", "with --object-store and --object-store-secret, a ConfigMap NAMESPACE/NAME of pgloop's "+
		"PGLOOP_BACKUP_S3_* variables naming the store as the default backup repository, applied before the manifests' Deployments: "+
		"manifests/operator's operator reads it as pgloop-system/"+operatorSettings+" (envFrom)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if cfg.storeSettings != "" && (!cfg.objectStore || cfg.storeSecret == "") {
		return errors.New("--object-store-settings needs --object-store and --object-store-secret (the Secret it names)")
	}
	if cfg.volumeWorkers < 0 {
		return fmt.Errorf("--volume-workers %d: want 0 (kwok's stages) or more", cfg.volumeWorkers)
	}
	if cfg.nodes < 0 || cfg.processNodes < 0 || cfg.realNodes < 0 || cfg.nodes+cfg.processNodes+cfg.realNodes == 0 {
		return fmt.Errorf("--nodes %d --process-nodes %d --real-nodes %d: want at least one node and no negative count", cfg.nodes, cfg.processNodes, cfg.realNodes)
	}
	if cfg.realNodes > 1 {
		return fmt.Errorf("--real-nodes %d: a plane runs 1 real node at most (docs/testbed.md, Real node)", cfg.realNodes)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	return up(ctx, cfg, stdout, stderr)
}

// up runs the plane until ctx ends or one of its processes dies.
func up(ctx context.Context, cfg config, stdout, stderr io.Writer) (err error) {
	p, err := testbed.Start(ctx, testbed.Options{
		Nodes:             cfg.nodes,
		ProcessNodes:      cfg.processNodes,
		RealNodes:         cfg.realNodes,
		ImageAliases:      cfg.imageAliases,
		TaintProcessNodes: cfg.taint,
		ImageBinaries:     cfg.images,
		KeepDir:           cfg.keepDir,
		VolumeWorkers:     cfg.volumeWorkers,
		NoResizer:         cfg.noResizer,
		ResizeFSDelay:     cfg.resizeFSDelay,
		KwokPodDelete:     cfg.kwokPodDelete,
		ObjectStore:       cfg.objectStore,
		Log:               stderr,
	})
	if err != nil {
		return err
	}
	defer func() {
		fmt.Fprintln(stderr, "testbed: stopping")
		err = errors.Join(err, p.Stop())
	}()

	var manifests []string
	if cfg.crds != "" {
		manifests = append(manifests, cfg.crds)
	}
	manifests = append(manifests, cfg.apply...)
	if len(manifests) > 0 || len(cfg.kustomize) > 0 {
		objs, err := testbed.ReadManifests(manifests...)
		if err != nil {
			return err
		}
		for _, dir := range cfg.kustomize {
			built, err := testbed.Kustomize(dir)
			if err != nil {
				return err
			}
			objs = append(objs, built...)
			manifests = append(manifests, dir+" (kustomize)")
		}
		if cfg.storeSettings != "" {
			cm, err := storeSettings(p.ObjectStore.S3, cfg.storeSettings, cfg.storeSecret)
			if err != nil {
				return err
			}
			objs = insertAfterNamespaces(objs, cm)
			manifests = append(manifests, "the ConfigMap "+cfg.storeSettings)
		}
		applyCtx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if err := testbed.Apply(applyCtx, p.Config, objs); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "testbed: applied %d objects from %s\n", len(objs), strings.Join(manifests, ", "))
	}

	store := ""
	if p.ObjectStore != nil {
		s3 := p.ObjectStore.S3
		if cfg.storeSecret != "" {
			if err := storeSecret(ctx, p, cfg.storeSecret); err != nil {
				return err
			}
			fmt.Fprintf(stderr, "testbed: Secret %s holds the object store's keys and CA\n", cfg.storeSecret)
		}
		store = fmt.Sprintf(`
An S3 object store is up at %s (bucket %s, region %s, path style,
CA %s):

    %s
`, s3.URL(), s3.Bucket, s3.Region, s3.CAFile, strings.Join(s3.Env(), "\n    "))
		// Beside the kubeconfig, and before it: a script waiting for
		// the kubeconfig finds them too.
		if cfg.kubeconfigOut != "" {
			out, err := filepath.Abs(cfg.kubeconfigOut)
			if err != nil {
				return err
			}
			dir := filepath.Dir(out)
			for name, data := range map[string][]byte{
				"s3.env":  []byte(strings.Join(s3.Env(), "\n") + "\n"),
				"s3.json": s3.JSON(),
			} {
				path, err := publishData(data, filepath.Join(dir, name))
				if err != nil {
					return err
				}
				defer os.Remove(path)
			}
			store += fmt.Sprintf("\nThe same in %s and %s.\n", filepath.Join(dir, "s3.env"), filepath.Join(dir, "s3.json"))
		}
	}
	kubeconfig := p.Kubeconfig
	if cfg.kubeconfigOut != "" {
		if kubeconfig, err = publish(p.Kubeconfig, cfg.kubeconfigOut); err != nil {
			return err
		}
		defer os.Remove(kubeconfig)
	}
	version := "?"
	if v, err := p.Client.Discovery().ServerVersion(); err == nil {
		version = v.GitVersion
	}
	fmt.Fprintf(stdout, `Kubernetes %s is up at %s (%d fake nodes, started in %v).
Point kubectl at it:

    export KUBECONFIG=%s
    kubectl get nodes

Its files are in %s (logs; a process node's pods
under kubelet/<node>/pods/<pod UID>/, their containers' output there).
%s
Ctrl-C stops it.
`, version, p.Config.Host, cfg.nodes, p.StartupTime.Round(100*time.Millisecond), kubeconfig, p.Dir, store)
	return p.Wait(ctx)
}

// operatorSettings is the ConfigMap of PGLOOP_<FLAG> variables that
// manifests/operator's Deployment reads (optional, envFrom).
const operatorSettings = "pgloop-operator-settings"

// storeSettings is the ConfigMap ref (NAMESPACE/NAME) of the variables that
// make the store pgloop's default backup repository, with the credentials
// of the Secret secretRef (NAMESPACE/NAME; the name is looked up in each
// cluster's namespace): what a user writes into operator.env of
// manifests/operator-with-backups for a store of their own.
func storeSettings(s3 testbed.S3, ref, secretRef string) (*unstructured.Unstructured, error) {
	ns, name, ok := strings.Cut(ref, "/")
	if !ok || ns == "" || name == "" {
		return nil, fmt.Errorf("--object-store-settings %q: want NAMESPACE/NAME", ref)
	}
	_, secret, _ := strings.Cut(secretRef, "/")
	cm := &unstructured.Unstructured{}
	cm.SetAPIVersion("v1")
	cm.SetKind("ConfigMap")
	cm.SetNamespace(ns)
	cm.SetName(name)
	err := unstructured.SetNestedStringMap(cm.Object, map[string]string{
		"PGLOOP_BACKUP_S3_ENDPOINT": s3.Endpoint,
		"PGLOOP_BACKUP_S3_BUCKET":   s3.Bucket,
		"PGLOOP_BACKUP_S3_REGION":   s3.Region,
		"PGLOOP_BACKUP_S3_SECRET":   secret,
		"PGLOOP_BACKUP_S3_CA_KEY":   storeSecretCAKey,
	}, "data")
	return cm, err
}

// insertAfterNamespaces puts obj after the last Namespace of objs (Apply
// keeps their order): after its own namespace, before the Deployment that
// reads it, whose pods read it once, when they start.
func insertAfterNamespaces(objs []*unstructured.Unstructured, obj *unstructured.Unstructured) []*unstructured.Unstructured {
	at := 0
	for i, o := range objs {
		if o.GetAPIVersion() == "v1" && o.GetKind() == "Namespace" {
			at = i + 1
		}
	}
	return slices.Insert(objs, at, obj)
}

// storeSecretCAKey is the key of the store's CA in the Secret of
// --object-store-secret.
const storeSecretCAKey = "ca.crt"

// storeSecret creates the Secret ref (NAMESPACE/NAME) with the object
// store's credentials and CA, under the keys pgloop reads a backup
// repository's Secret by.
func storeSecret(ctx context.Context, p *testbed.Plane, ref string) error {
	ns, name, ok := strings.Cut(ref, "/")
	if !ok || ns == "" || name == "" {
		return fmt.Errorf("--object-store-secret %q: want NAMESPACE/NAME", ref)
	}
	s3 := p.ObjectStore.S3
	ca, err := os.ReadFile(s3.CAFile)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err = p.Client.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		StringData: map[string]string{"AWS_ACCESS_KEY_ID": s3.AccessKey, "AWS_SECRET_ACCESS_KEY": s3.SecretKey, storeSecretCAKey: string(ca)},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("while creating Secret %s: %w", ref, err)
	}
	return nil
}

// publish copies the kubeconfig to path atomically, so a script waiting for
// path to exist sees a ready plane and a whole file.
func publish(src, path string) (string, error) {
	data, err := os.ReadFile(src)
	if err != nil {
		return "", err
	}
	return publishData(data, path)
}

// publishData writes data to path atomically, readable by its owner only
// (a kubeconfig, the object store's keys).
func publishData(data []byte, path string) (string, error) {
	path, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("while writing %s: %w", path, err)
	}
	return path, nil
}
