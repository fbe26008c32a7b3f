#!/usr/bin/env bash
# make data-plane-deps: installs what the process kubelet runs behind pods
# (docs/testbed.md, "Data plane"): Patroni 3.0, PostgreSQL 15, PgBouncer
# (connection-pooler pods) and pgBackRest 2.45 (backups and WAL archiving to
# the plane's S3 store, docs/backups.md) from Debian's packages. Does nothing
# when they are there already.
set -euo pipefail

need=()
[ -x /usr/bin/patroni ] || need+=(patroni)
[ -x /usr/lib/postgresql/15/bin/postgres ] || need+=(postgresql-15)
[ -x /usr/sbin/pgbouncer ] || need+=(pgbouncer)
[ -x /usr/bin/pgbackrest ] || need+=(pgbackrest)
# Patroni runs on Debian's python3, whose modules the packages install.
[ -x /usr/bin/python3 ] || need+=(python3)
if [ ${#need[@]} -eq 0 ]; then
	exit 0
fi
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
	echo "data-plane-deps: missing ${need[*]}; install them as root: apt-get update && apt-get install -y ${need[*]}" >&2
	exit 1
fi
echo "data-plane-deps: installing ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq "${need[@]}" >/dev/null
# The packages start no server we use: each pod's PostgreSQL is started by
# its Patroni, each pooler pod's PgBouncer by the process kubelet (Debian's
# pgbouncer service listens on 127.0.0.1:6432 only), and pgbackrest is a
# command with no service. A cluster the postgresql package may have created listens on
# 127.0.0.1 only, never on the pods' addresses.
