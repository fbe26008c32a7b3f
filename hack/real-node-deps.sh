#!/usr/bin/env bash
# make real-node-deps: installs what the test plane's real node runs on
# (docs/testbed.md, "Real node"): Debian's containerd (and its ctr), runc,
# the CNI plugins and iptables. Does nothing when they are there already.
# containerd's packaged service is kept from starting: the plane starts its
# own containerd, with its own configuration and socket, for each node.
set -euo pipefail

need=()
[ -x /usr/bin/containerd ] || need+=(containerd)
[ -x /usr/sbin/runc ] || need+=(runc)
[ -x /usr/lib/cni/bridge ] || need+=(containernetworking-plugins)
[ -x /usr/sbin/iptables ] || need+=(iptables)
[ -x /usr/sbin/ip ] || need+=(iproute2)
if [ ${#need[@]} -eq 0 ]; then
	exit 0
fi
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
	echo "real-node-deps: missing ${need[*]}; install them as root: apt-get update && apt-get install -y ${need[*]}" >&2
	exit 1
fi
echo "real-node-deps: installing ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
# invoke-rc.d asks policy-rc.d before starting a packaged service: 101
# means no. Ours only for the install; one that was there is put back.
policy=/usr/sbin/policy-rc.d
saved=
if [ -e "$policy" ]; then
	saved=$(mktemp)
	cp -p "$policy" "$saved"
fi
restore() {
	if [ -n "$saved" ]; then mv "$saved" "$policy"; else rm -f "$policy"; fi
}
trap restore EXIT
printf '#!/bin/sh\nexit 101\n' >"$policy"
chmod 0755 "$policy"
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
# A packaged containerd that did start (no invoke-rc.d on this machine)
# would hold /run/containerd: stop it.
if command -v systemctl >/dev/null && systemctl is-active --quiet containerd 2>/dev/null; then
	systemctl stop containerd || true
fi
