#!/usr/bin/env bash
# make run: runs the pgloop operator in the foreground.
#  - KUBECONFIG unset: brings up the local control plane (bin/testbed up,
#    CRDs applied) with a real node (a kubelet on containerd: pods are
#    containers of pgloop's images, with pod IPs, Services and cluster
#    DNS), and the operator, then applies the sample clusters. Where this
#    machine cannot run a real node (`testbed check-real-node` says why:
#    not root, no containerd, no bridge netfilter) or PGLOOP_REAL_NODE=0,
#    one process node runs the pods' Patroni and PostgreSQL as host
#    processes instead (PLANE_PROCESS_NODES, default 1). With KWOK nodes
#    (PLANE_NODES, default 0) the role labeller stands in for Patroni on
#    them. Ctrl-C stops everything this script started.
#  - KUBECONFIG set: runs the operator against that cluster (the CRD must be
#    installed: kubectl apply -f manifests/crds).
#  - PGLOOP_DEPLOYMENT=1 (make run-deployment), KUBECONFIG unset: the same
#    plane, but the operator is installed as users install it, with
#    manifests/operator (kustomize): two replicas of a Deployment electing a
#    leader, on the process node, which runs pgloop's image
#    (ghcr.io/pgloop/pgloop, any tag) as bin/pgloop with the pod's
#    in-cluster configuration and probes (docs/testbed.md, "Operator pods").
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

kwok_nodes="${PLANE_NODES:-0}"
# The object store (S3 over HTTPS) is the clusters' default backup
# repository: its keys and CA go to the Secret pgloop-backup of the samples'
# namespace, and its address to the operator's --backup-s3-* flags: on the
# command line below, or, for the Deployment, as users set them
# (docs/user-guide.md, "Settings"): PGLOOP_BACKUP_S3_* variables in the
# ConfigMap pgloop-operator-settings that manifests/operator reads.
deployment=()
if [ -n "${PGLOOP_DEPLOYMENT:-}" ]; then
	deployment=(--image-binary "ghcr.io/pgloop/pgloop=$bin/pgloop" --apply-kustomize manifests/operator
		--object-store-settings pgloop-system/pgloop-operator-settings)
fi
nodes=(--process-nodes "${PLANE_PROCESS_NODES:-1}")
real=
if [ "${PGLOOP_REAL_NODE:-1}" != 0 ]; then
	# What the real node runs on, and the images it runs: as root only
	# (apt-get, mmdebstrap); ~10 min the first time, seconds after.
	if [ "$(id -u)" -eq 0 ]; then
		"${MAKE:-make}" -s -C "$root" real-node-deps images >&2 || echo "pgloop: could not prepare the real node (above)" >&2
	fi
	if why=$("$bin/testbed" check-real-node 2>&1) && [ -s "$bin/pgloop-instance-image.tar" ]; then
		real=1
		nodes=(--real-nodes 1)
		if [ -n "${PGLOOP_DEPLOYMENT:-}" ]; then
			# The real node does not load the operator's image (make
			# image) yet: the process node runs it as bin/pgloop.
			echo "pgloop: the operator as a Deployment runs on a process node (ghcr.io/pgloop/pgloop as bin/pgloop)" >&2
			nodes=(--process-nodes 1)
			real=
		fi
	else
		[ -s "$bin/pgloop-instance-image.tar" ] || why="no $bin/pgloop-instance-image.tar (make images, as root)"
		echo "pgloop: no real node on this machine, pods run as processes on a process node instead: ${why#testbed: }" >&2
	fi
fi
"$bin/testbed" up --nodes "$kwok_nodes" "${nodes[@]}" --kubeconfig-out "$kubeconfig" \
	--object-store --object-store-secret default/pgloop-backup \
	--crds manifests/crds --apply manifests/samples --apply hack/samples "${deployment[@]}" &
pids+=($!)
# testbed writes the kubeconfig only once the plane is ready and the CRDs
# are Established; it exits (and so do we) if the plane fails.
until [ -s "$kubeconfig" ]; do
	kill -0 "${pids[0]}" 2>/dev/null || { echo "pgloop: the control plane did not start" >&2; exit 1; }
	sleep 0.2
done

if [ "$kwok_nodes" -gt 0 ]; then
	"$bin/labeller" --kubeconfig "$kubeconfig" &
	pids+=($!)
fi
if [ -n "${PGLOOP_DEPLOYMENT:-}" ]; then
	cat <<TXT

pgloop runs as manifests/operator installs it, on a local control plane with
the clusters of manifests/samples/ and hack/samples/. Its default backup
repository is the plane's S3 store, set as users set it: the ConfigMap
pgloop-system/pgloop-operator-settings (PGLOOP_BACKUP_S3_* variables), which
the Deployment reads. In another terminal:

    export KUBECONFIG=$kubeconfig
    kubectl -n pgloop-system get pods -o wide     # two replicas, both Ready
    kubectl -n pgloop-system get lease pgloop-operator   # HOLDER: the leader
    curl -s http://<a pod's IP>:8080/metrics | grep ^pgloop_leader
    kubectl get pg -w; bin/pgloop status -A
    kubectl -n pgloop-system get configmap pgloop-operator-settings -o yaml

local-pg15 archives its WAL with pgBackRest to that store: bin/pgloop
status local-pg15 shows its Backups.

The operator containers' output is in the plane's directory (printed
above), kubelet/<node>/pods/<pod UID>/operator.log. Ctrl-C stops the
control plane.
TXT
	wait -n "${pids[@]}"
	exit
fi
# PGLOOP_S3_ENDPOINT, _BUCKET, _REGION...: written before the kubeconfig.
# shellcheck disable=SC1091
. "$state/s3.env"
"$bin/pgloop" operator --kubeconfig "$kubeconfig" --leader-elect=false --health-addr 127.0.0.1:0 \
	--backup-s3-endpoint "$PGLOOP_S3_ENDPOINT" --backup-s3-bucket "$PGLOOP_S3_BUCKET" --backup-s3-region "$PGLOOP_S3_REGION" \
	--backup-s3-secret pgloop-backup --backup-s3-ca-key ca.crt "$@" &
pids+=($!)

cat <<TXT

pgloop runs on a local control plane, with the clusters of manifests/samples/
and hack/samples/. In another terminal:

    export KUBECONFIG=$kubeconfig
    kubectl get pg -w
    bin/pgloop status -A

$(if [ -n "$real" ]; then cat <<REAL
Pods run on a real node (kubelet, containerd): containers of pgloop's
images, with pod IPs on the bridge pgloop0 (kubectl get pods -o wide), Services
through kube-proxy and names through the cluster DNS. kubectl logs, exec and
port-forward work. To connect to local-pg15's primary, at its pod IP or
through its master Service from inside a pod:

    pg=local-pg15
    ip=\$(kubectl get pod \$(kubectl get pg \$pg -o jsonpath='{.status.primary}') -o jsonpath='{.status.podIP}')
    PGPASSWORD=\$(kubectl get secret postgres.\$pg.credentials.postgresql.pgloop.dev -o jsonpath='{.data.password}' | base64 -d) \\
        psql -h \$ip -U postgres
    kubectl exec -it \$pg-0 -- psql -h \$pg -U postgres    # password as above
    kubectl logs \$pg-0                                      # Patroni's log
REAL
else cat <<PROCESS
Pods on the process node run real Patroni and PostgreSQL at their pod IPs
(kubectl get pods -o wide). To connect to local-pg15's primary:

    pg=local-pg15
    ip=\$(kubectl get pod \$(kubectl get pg \$pg -o jsonpath='{.status.primary}') -o jsonpath='{.status.podIP}')
    PGPASSWORD=\$(kubectl get secret postgres.\$pg.credentials.postgresql.pgloop.dev -o jsonpath='{.data.password}' | base64 -d) \\
        psql -h \$ip -U postgres
PROCESS
fi)

local-pg15 archives its WAL with pgBackRest to the plane's S3 store
(\$PGLOOP_S3_ENDPOINT in $state/s3.env): bin/pgloop status local-pg15
shows its Backups. The other samples run on simulated nodes (kwok), where
no PostgreSQL runs: their status says what pgloop cannot reach there, and
acid-full-cluster, which names Spilo's image (no pgBackRest), says it does
not archive (ContinuousArchiving False, ArchiveBlocked).

Ctrl-C stops the operator and the control plane.
TXT
wait -n "${pids[@]}"
