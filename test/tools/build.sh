#!/usr/bin/env bash
# Builds the local control plane's binaries into bin/ (repository root),
# skipping those already there. Versions are pinned by the go.mod files
# beside this script and by KWOK_VERSION below.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
bin="${BIN:-$root/bin}"
mkdir -p "$bin"

KUBE_VERSION=v1.37.2
KWOK_VERSION=v0.8.0

kube_ldflags() {
	local v=$KUBE_VERSION major minor
	major=${v#v}; major=${major%%.*}
	minor=${v#v*.}; minor=${minor%%.*}
	local flags="-s -w"
	for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		flags+=" -X $pkg.gitVersion=$v -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
		flags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
	done
	echo "$flags"
}

build() { # name, then the command that builds it
	local name=$1; shift
	if [ -x "$bin/$name" ]; then
		return 0
	fi
	echo "testbed: building $name" >&2
	local start=$SECONDS
	"$@"
	echo "testbed: built $name in $((SECONDS - start))s" >&2
}

build etcd bash -c "cd '$here/etcd' && go build -trimpath -ldflags '-s -w' -o '$bin/etcd' ."
for cmd in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy; do
	build "$cmd" bash -c "cd '$here/kube' && go build -trimpath -ldflags '$(kube_ldflags)' -o '$bin/$cmd' k8s.io/kubernetes/cmd/$cmd"
done
# SeaweedFS's all-in-one `weed` (Apache-2.0): the plane's S3 object store
# (docs/testbed.md, "Object store"). ~8 min cold on two cores.
build weed bash -c "cd '$here/seaweedfs' && go build -trimpath -ldflags '-s -w' -o '$bin/weed' github.com/seaweedfs/seaweedfs/weed"
# CoreDNS (Apache-2.0) with the plugins the real node's cluster DNS uses
# (test/tools/coredns).
build coredns bash -c "cd '$here/coredns' && go build -trimpath -ldflags '-s -w' -o '$bin/coredns' ."
build kwok bash -c "GOBIN='$bin' GOFLAGS=-trimpath go install sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"

# kwok's Stage objects (node, pod and volume lifecycles), from the same module
# version as the binary: the test bed passes each file to kwok with --config.
stages_dir="$bin/kwok-stages"
if ! compgen -G "$stages_dir/*.yaml" >/dev/null; then
	echo "testbed: copying kwok $KWOK_VERSION stages" >&2
	# Outside any module, so no go.mod is touched.
	scratch=$(mktemp -d)
	kwok_dir=$(cd "$scratch" && go mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" |
		sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	rmdir "$scratch"
	mkdir -p "$stages_dir.tmp"
	for f in node/fast/node-initialize.yaml \
		node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
		pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml \
		volume/fast/pvc-provision.yaml volume/fast/pv-bind.yaml \
		volume/fast/pvc-delete.yaml volume/fast/pv-delete.yaml; do
		install -m 0644 "$kwok_dir/kustomize/stage/$f" "$stages_dir.tmp/"
	done
	rm -rf "$stages_dir"
	mv "$stages_dir.tmp" "$stages_dir"
fi
