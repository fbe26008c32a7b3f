// Command dataimage builds the images pgloop's pods run, without a
// container engine (docs/images.md): -kind instance, PostgreSQL 15 with
// Patroni and pgBackRest (ghcr.io/pgloop/postgres:15-VERSION), or -kind
// pooler, PgBouncer (ghcr.io/pgloop/pgbouncer:VERSION), each from Debian
// bookworm's packages for linux/amd64 with pgloop's binary as the
// entrypoint, written as an OCI layout in a tar file (an oci-archive
// named by the tag, as `make image` writes the operator's).
//
//	cd hack/release && go run ./dataimage -kind instance -bin ../../bin/linux-amd64/pgloop \
//	    -out ../../bin/pgloop-instance-image.tar -version v1.2.3
//
// The root file system comes from mmdebstrap (as root) and is one layer,
// cached under -cache by a key of the package versions apt resolves from
// Debian's mirrors first; pgloop's binary is a second layer. The Makefile's
// `images` target builds the binary and runs it for both kinds.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"
)

func main() {
	var o options
	kindName := flag.String("kind", "", "instance or pooler")
	out := flag.String("out", "", "the OCI layout tar file to write")
	cache := flag.String("cache", defaultCache(), "where the root file systems' layers and apt's lists are kept ($PGLOOP_CACHE/images)")
	flag.StringVar(&o.Binary, "bin", "", "pgloop built for linux/amd64 (CGO_ENABLED=0)")
	flag.StringVar(&o.Version, "version", "dev", "pgloop's version: the image's label, and its tag unless -tag (15-VERSION for the instance)")
	tag := flag.String("tag", "", "the image's tag: the one pgloop's default names (pgloop version --images); empty means by -version")
	flag.StringVar(&o.Name, "name", "", "the image's whole reference (pgloop version --images), annotated for `ctr images import`; its tag must be the image's")
	flag.StringVar(&o.Revision, "revision", "", "the source revision label (a git commit)")
	flag.StringVar(&o.Source, "source", "https://github.com/pgloop/pgloop", "the source label")
	flag.Parse()
	k, ok := kinds[*kindName]
	if !ok || *out == "" || o.Binary == "" {
		fmt.Fprintln(os.Stderr, "dataimage: want -kind instance|pooler, -bin and -out")
		os.Exit(2)
	}
	created, err := sourceDate()
	if err != nil {
		fmt.Fprintln(os.Stderr, "dataimage:", err)
		os.Exit(2)
	}
	o.Created = created
	o.Tag = *tag
	if o.Tag == "" {
		o.Tag = k.tag(o.Version)
	}
	if o.Name != "" && !strings.HasSuffix(o.Name, ":"+o.Tag) {
		fmt.Fprintf(os.Stderr, "dataimage: -name %s does not end in the tag %s\n", o.Name, o.Tag)
		os.Exit(2)
	}
	if err := run(k, *cache, *out, o); err != nil {
		fmt.Fprintln(os.Stderr, "dataimage:", err)
		os.Exit(1)
	}
}

func defaultCache() string {
	if c := os.Getenv("PGLOOP_CACHE"); c != "" {
		return c + "/images"
	}
	return "/var/cache/pgloop/images"
}

// sourceDate is SOURCE_DATE_EPOCH, or now.
func sourceDate() (time.Time, error) {
	epoch := os.Getenv("SOURCE_DATE_EPOCH")
	if epoch == "" {
		return time.Now().UTC().Truncate(time.Second), nil
	}
	var sec int64
	if _, err := fmt.Sscan(epoch, &sec); err != nil {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH=%q: %w", epoch, err)
	}
	return time.Unix(sec, 0).UTC(), nil
}

func run(k kind, cache, out string, o options) error {
	// The packages are the host's architecture: mmdebstrap installs
	// them natively, as root, running their maintainer scripts.
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		return fmt.Errorf("the images are linux/amd64 and built on linux/amd64, not %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("mmdebstrap --mode=root needs root")
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return err
	}
	logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, "dataimage: "+format+"\n", args...) }
	rootfs, err := rootfsLayer(cache, k, logf)
	if err != nil {
		return err
	}
	for _, m := range k.Main {
		if !slices.ContainsFunc(rootfs.Packages, func(p string) bool { return strings.HasPrefix(p, m+"=") }) {
			return fmt.Errorf("%s is not installed in %s", m, rootfs.Key)
		}
	}
	img, err := buildImage(k, rootfs, o)
	if err != nil {
		return err
	}
	manifest, err := img.Digest()
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	digest, err := writeArchive(img, o.Tag, o.Name, cf.Config.Labels, out, o.Created)
	if err != nil {
		return err
	}
	fi, err := os.Stat(out)
	if err != nil {
		return err
	}
	fmt.Printf("%s: %s (%s) index %s, linux/amd64 %s; rootfs layer %d MB gzipped (%d MB unpacked), file %d MB; %s\n",
		k.Name, out, o.Tag, digest, manifest, rootfs.Size>>20, rootfs.TarSize>>20, fi.Size()>>20, cf.Config.Labels[labelPackages])
	return nil
}
