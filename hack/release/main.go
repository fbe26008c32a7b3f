// Command release builds a pgloop release into dist/<version>/ and
// publishes its image, without CI (docs/releasing.md): the krew archives
// of `kubectl pgloop` for linux and darwin on amd64 and arm64, the Helm
// chart's package, the CRD, the krew manifest with the archives' sha256,
// the image's oci-archive (built before by `make image`), the instance's
// and pooler's (`make images`, docs/images.md) and SHA256SUMS. With -push
// it pushes the three image indexes to a registry and checks what the
// registry holds; it prints what else to upload.
//
// `make release VERSION=v1.2.3 [PUSH=registry/repository]` runs it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/version"
)

// options are the release's inputs, the command's flags.
type options struct {
	root       string // the repository
	version    string // vMAJOR.MINOR.PATCH[-PRE]
	commit     string
	imageTar   string // `make image`'s oci-archive
	push       string // image repository to push to; empty: none
	dist       string // dist/, where <version>/ goes
	urlBase    string // where the release assets are downloaded from
	modTime    time.Time
	allowDirty bool
	// dataImages are the images pgloop's pods run (`make images`).
	dataImages []dataImage
}

// dataImage is one of the images `make images` builds.
type dataImage struct {
	name string // instance, pooler: bin/pgloop-NAME-image.tar
	tar  string // its oci-archive
	tag  string // its tag, and its name in the archive
	push string // the repository to push it to; empty: none
}

// crdFile is the CRD's name among the release assets, for `kubectl apply
// --server-side -f <url>`.
const crdFile = "postgresqls.pgloop.dev.yaml"

func main() {
	var o options
	flag.StringVar(&o.root, "root", "../..", "the repository's root")
	flag.StringVar(&o.version, "version", "", "the release's version, vMAJOR.MINOR.PATCH[-PRE] (required)")
	flag.StringVar(&o.commit, "commit", "", "the commit released (default: git rev-parse HEAD)")
	flag.StringVar(&o.imageTar, "image-tar", "", "make image's oci-archive (default: ROOT/bin/pgloop-image.tar)")
	flag.StringVar(&o.push, "push", "", "push the image to this repository as :VERSION, e.g. ghcr.io/pgloop/pgloop (default: push nothing)")
	flag.StringVar(&o.dist, "dist", "", "where VERSION/ is written (default: ROOT/dist)")
	flag.StringVar(&o.urlBase, "url-base", "https://github.com/pgloop/pgloop/releases/download/{version}",
		"URL the assets are downloaded from, in the krew manifest; {version} is replaced")
	flag.BoolVar(&o.allowDirty, "allow-dirty", false, "release from a work tree with uncommitted changes")
	pushInstance := flag.String("push-instance", "", "push the instance image here as :15-VERSION (default: postgres beside -push's repository, e.g. ghcr.io/pgloop/postgres)")
	instanceTag := flag.String("instance-tag", "", "the instance image's tag, the one pgloop's default names (pgloop version --images); empty means 15-VERSION")
	poolerTag := flag.String("pooler-tag", "", "the pooler image's tag (pgloop version --images); empty means VERSION")
	pushPooler := flag.String("push-pooler", "", "push the pooler image here as :VERSION (default: pgbouncer beside -push's repository, e.g. ghcr.io/pgloop/pgbouncer)")
	flag.Parse()
	o.dataImages = []dataImage{{name: "instance", push: *pushInstance, tag: *instanceTag}, {name: "pooler", push: *pushPooler, tag: *poolerTag}}
	if err := o.complete(); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(2)
	}
	if err := release(context.Background(), o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

// complete checks the options and fills in the defaults from the
// repository: the commit, and its time as the time of every file written
// (SOURCE_DATE_EPOCH wins), so that a commit makes the same assets.
func (o *options) complete() error {
	if !strings.HasPrefix(o.version, "v") {
		return fmt.Errorf("-version %q: want vMAJOR.MINOR.PATCH[-PRE]", o.version)
	}
	if _, err := version.ParseSemantic(o.version); err != nil {
		return fmt.Errorf("-version %q: %w", o.version, err)
	}
	git := func(args ...string) (string, error) {
		out, err := exec.Command("git", append([]string{"-C", o.root}, args...)...).Output()
		return strings.TrimSpace(string(out)), err
	}
	if o.commit == "" {
		c, err := git("rev-parse", "HEAD")
		if err != nil {
			return fmt.Errorf("git rev-parse HEAD: %w", err)
		}
		o.commit = c
	}
	if !o.allowDirty {
		status, err := git("status", "--porcelain", "--untracked-files=no")
		if err != nil {
			return fmt.Errorf("git status: %w", err)
		}
		if status != "" {
			return fmt.Errorf("the work tree has uncommitted changes (-allow-dirty to release anyway):\n%s", status)
		}
	}
	epoch := os.Getenv("SOURCE_DATE_EPOCH")
	if epoch == "" {
		var err error
		if epoch, err = git("log", "-1", "--format=%ct", o.commit); err != nil {
			return fmt.Errorf("git log: %w", err)
		}
	}
	sec, err := strconv.ParseInt(epoch, 10, 64)
	if err != nil {
		return fmt.Errorf("commit time %q: %w", epoch, err)
	}
	o.modTime = time.Unix(sec, 0).UTC()
	if o.imageTar == "" {
		o.imageTar = filepath.Join(o.root, "bin", "pgloop-image.tar")
	}
	if o.dist == "" {
		o.dist = filepath.Join(o.root, "dist")
	}
	for i := range o.dataImages {
		d := &o.dataImages[i]
		d.tar = filepath.Join(o.root, "bin", "pgloop-"+d.name+"-image.tar")
		tag, sibling := o.version, "pgbouncer"
		if d.name == "instance" {
			tag, sibling = "15-"+o.version, "postgres"
		}
		if d.tag == "" {
			d.tag = tag
		}
		if d.push == "" && o.push != "" {
			d.push = path.Dir(o.push) + "/" + sibling
		}
	}
	o.urlBase = strings.ReplaceAll(o.urlBase, "{version}", o.version)
	return nil
}

// release writes the assets into dist/<version>/ (anew), pushes the image
// when asked, and tells out what to upload.
func release(ctx context.Context, o options, out io.Writer) error {
	dir := filepath.Join(o.dist, o.version)
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}

	// The image, as built by make image.
	image := filepath.Join(dir, "pgloop-image-"+o.version+".tar")
	if err := copyFile(o.imageTar, image); err != nil {
		return fmt.Errorf("the image (make image VERSION=%s): %w", o.version, err)
	}
	scratch, err := os.MkdirTemp("", "pgloop-release-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(scratch)
	if _, err := openImage(image, o.version, scratch); err != nil {
		return err
	}
	// The instance's and pooler's images, as built by make images.
	dataTars := map[string]string{}
	for _, d := range o.dataImages {
		file := filepath.Join(dir, "pgloop-"+d.name+"-image-"+o.version+".tar")
		if err := copyFile(d.tar, file); err != nil {
			return fmt.Errorf("the %s image (make images VERSION=%s): %w", d.name, o.version, err)
		}
		if _, err := openImage(file, d.tag, filepath.Join(scratch, d.name)); err != nil {
			return err
		}
		dataTars[d.name] = file
	}

	// kubectl pgloop, and its krew manifest.
	var platforms []krewPlatform
	for _, p := range krewPlatforms {
		fmt.Fprintf(out, "building %s\n", p.archiveName())
		path, err := pluginArchive(o.root, p, o.version, o.commit, dir, o.modTime)
		if err != nil {
			return err
		}
		sum, err := fileSHA256(path)
		if err != nil {
			return err
		}
		platforms = append(platforms, krewPlatform{OS: p.OS, Arch: p.Arch, URI: o.urlBase + "/" + p.archiveName(), SHA256: sum})
	}
	tmpl, err := os.ReadFile(filepath.Join(o.root, "hack", "krew", "pgloop.yaml"))
	if err != nil {
		return err
	}
	manifest, err := renderKrewManifest(tmpl, o.version, platforms)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "pgloop.yaml"), manifest, 0o644); err != nil {
		return err
	}

	// The chart, and its CRD on its own.
	chartPkg, err := packageChart(filepath.Join(o.root, "charts", "pgloop"), o.version, dir, o.modTime)
	if err != nil {
		return err
	}
	if err := copyFile(filepath.Join(o.root, "manifests", "crds", "pgloop.dev_postgresqls.yaml"), filepath.Join(dir, crdFile)); err != nil {
		return err
	}

	if err := writeChecksums(dir); err != nil {
		return err
	}
	fmt.Fprintf(out, "\nrelease %s (commit %s) in %s\n", o.version, o.commit, dir)

	if o.push != "" {
		digest, err := pushImage(ctx, image, o.version, o.push)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "pushed %s:%s@%s\n", o.push, o.version, digest)
		if o.push != defaultImage {
			fmt.Fprintf(out, "note: the chart's default image is %s:%s; users of this one set image.repository=%s\n", defaultImage, o.version, o.push)
		}
		for _, d := range o.dataImages {
			digest, err := pushImage(ctx, dataTars[d.name], d.tag, d.push)
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "pushed %s:%s@%s\n", d.push, d.tag, digest)
		}
	} else {
		fmt.Fprintf(out, "pushed no image (-push, or make release PUSH=...); to push it later:\n  skopeo copy --all oci-archive:%s:%s docker://REPOSITORY:%s\n", image, o.version, o.version)
		for _, d := range o.dataImages {
			fmt.Fprintf(out, "  skopeo copy --all oci-archive:%s:%s docker://REPOSITORY:%s\n", dataTars[d.name], d.tag, d.tag)
		}
	}
	fmt.Fprintf(out, `
still to do by hand:
  1. tag and push the commit: git tag %[1]s %[2]s && git push origin %[1]s
  2. upload every file of %[3]s as the release %[1]s's assets
     (the krew manifest's URLs point at %[4]s/)
  3. optionally, the chart to an OCI registry: helm push %[5]s oci://REGISTRY/charts
  4. propose %[3]s/pgloop.yaml to krew-index as plugins/pgloop.yaml
`, o.version, o.commit, dir, o.urlBase, chartPkg)
	return nil
}

// defaultImage is the chart's image.repository (charts/pgloop/values.yaml).
const defaultImage = "ghcr.io/pgloop/pgloop"

func copyFile(from, to string) error {
	data, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, data, 0o644)
}

// writeChecksums writes dir/SHA256SUMS, as sha256sum writes it, of every
// other file in dir (sha256sum -c SHA256SUMS checks them).
func writeChecksums(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var lines []string
	for _, e := range entries {
		if e.IsDir() || e.Name() == "SHA256SUMS" {
			continue
		}
		sum, err := fileSHA256(filepath.Join(dir, e.Name()))
		if err != nil {
			return err
		}
		lines = append(lines, sum+"  "+e.Name()+"\n")
	}
	if len(lines) == 0 {
		return errors.New("no file to sum")
	}
	slices.SortFunc(lines, func(a, b string) int { return strings.Compare(a[66:], b[66:]) })
	return os.WriteFile(filepath.Join(dir, "SHA256SUMS"), []byte(strings.Join(lines, "")), 0o644)
}
