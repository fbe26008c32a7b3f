#!/usr/bin/env bash
# make run: runs the pgloop operator in the foreground.
#  - KUBECONFIG unset: brings up the local control plane (bin/testbed up,
#    CRDs applied), the role labeller that stands in for Patroni on KWOK
#    nodes, and the operator, then applies the sample clusters. Ctrl-C stops
#    everything this script started.
#  - KUBECONFIG set: runs the operator against that cluster (the CRD must be
#    installed: kubectl apply -f manifests/crds).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin="${BIN:-$root/bin}"
cd "$root"

if [ -n "${KUBECONFIG:-}" ]; then
	echo "pgloop: running against KUBECONFIG=$KUBECONFIG"
	exec "$bin/pgloop" operator --kubeconfig "$KUBECONFIG" "$@"
fi

state="$root/.tmp"
mkdir -p "$state"
kubeconfig="$state/kubeconfig"
rm -f "$kubeconfig"
pids=()
cleanup() {
	trap - INT TERM EXIT
	for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
	for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap cleanup INT TERM EXIT

"$bin/testbed" up --nodes "${PLANE_NODES:-3}" --kubeconfig-out "$kubeconfig" \
	--crds manifests/crds --apply manifests/samples &
pids+=($!)
# testbed writes the kubeconfig only once the plane is ready and the CRDs
# are Established; it exits (and so do we) if the plane fails.
until [ -s "$kubeconfig" ]; do
	kill -0 "${pids[0]}" 2>/dev/null || { echo "pgloop: the control plane did not start" >&2; exit 1; }
	sleep 0.2
done

"$bin/labeller" --kubeconfig "$kubeconfig" &
pids+=($!)
"$bin/pgloop" operator --kubeconfig "$kubeconfig" --leader-elect=false --health-addr 127.0.0.1:0 "$@" &
pids+=($!)

cat <<TXT

pgloop runs on a local control plane, with the clusters of manifests/samples/.
In another terminal:

    export KUBECONFIG=$kubeconfig
    kubectl get pg -w
    bin/pgloop status -A

Ctrl-C stops the operator, the labeller and the control plane.
TXT
wait -n "${pids[@]}"
