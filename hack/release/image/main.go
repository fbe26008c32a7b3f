// Command image builds pgloop's operator image without a container engine:
// an OCI image index for linux/amd64 and linux/arm64, each image one layer
// (the static pgloop binary as /pgloop, a passwd and group naming the
// non-root user 65532, an empty /tmp) on no base image, written as an OCI
// layout in a tar file (oci-archive: `skopeo copy oci-archive:FILE
// docker://REGISTRY/pgloop:TAG`, `podman load -i FILE`).
//
//	cd hack/release && go run ./image -out ../../bin/pgloop-image.tar -version v1.2.3 \
//	    -bin linux/amd64=../../bin/linux-amd64/pgloop -bin linux/arm64=../../bin/linux-arm64/pgloop
//
// The Makefile's `image` target cross-compiles the binaries and runs it.
// It is a command of hack/release's module, so that go-containerregistry
// stays out of the operator's go.mod.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"
)

type platformBins map[string]string

func (p platformBins) String() string { return fmt.Sprint(map[string]string(p)) }

func (p platformBins) Set(v string) error {
	platform, path, ok := strings.Cut(v, "=")
	if !ok || !strings.HasPrefix(platform, "linux/") {
		return fmt.Errorf("%q: want linux/ARCH=PATH", v)
	}
	p[platform] = path
	return nil
}

func main() {
	bins := platformBins{}
	var opts Options
	flag.Var(bins, "bin", "a platform's binary, linux/ARCH=PATH (repeat for each platform)")
	out := flag.String("out", "bin/pgloop-image.tar", "the OCI layout tar file to write")
	flag.StringVar(&opts.Version, "version", "dev", "the image's version label")
	flag.StringVar(&opts.Revision, "revision", "", "the source revision label (a git commit)")
	flag.StringVar(&opts.Source, "source", "https://github.com/pgloop/pgloop", "the source label")
	flag.Parse()
	opts.Binaries = bins
	opts.Created = time.Now().UTC()
	if epoch := os.Getenv("SOURCE_DATE_EPOCH"); epoch != "" {
		var sec int64
		if _, err := fmt.Sscan(epoch, &sec); err != nil {
			fmt.Fprintf(os.Stderr, "image: SOURCE_DATE_EPOCH=%q: %v\n", epoch, err)
			os.Exit(2)
		}
		opts.Created = time.Unix(sec, 0).UTC()
	}
	if err := Build(*out, opts); err != nil {
		fmt.Fprintf(os.Stderr, "image: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("wrote %s (%s)\n", *out, strings.Join(opts.platforms(), ", "))
}
