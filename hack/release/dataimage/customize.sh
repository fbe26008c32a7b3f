#!/bin/sh
# mmdebstrap's customize hook of pgloop's instance and pooler images
# (docs/images.md): $1 is the root file system, complete, before mmdebstrap's
# own cleanup. It gives postgres the ids pgloop's pods run as (Spilo's), makes
# its directories, and removes what differs between two builds of the same
# packages or must not ship.
set -eu
root=$1
uid=101
gid=103

# 1. postgres (made by postgresql-common's postinst) becomes 101:103, home
# /home/postgres as in Spilo ($PGHOME; pods mount the data at
# /home/postgres/pgdata). What the packages made for the old ids follows.
old_uid=$(chroot "$root" id -u postgres)
old_gid=$(chroot "$root" id -g postgres)
if taken=$(chroot "$root" getent passwd "$uid") && [ "${taken%%:*}" != postgres ]; then
	echo "customize: uid $uid is taken by ${taken%%:*}" >&2
	exit 1
fi
if taken=$(chroot "$root" getent group "$gid") && [ "${taken%%:*}" != postgres ]; then
	echo "customize: gid $gid is taken by ${taken%%:*}" >&2
	exit 1
fi
chroot "$root" groupmod -g "$gid" postgres
chroot "$root" usermod -u "$uid" -g "$gid" -d /home/postgres postgres
if [ "$old_uid" != "$uid" ]; then
	find "$root" -xdev -uid "$old_uid" -exec chown -h "$uid" {} +
fi
if [ "$old_gid" != "$gid" ]; then
	find "$root" -xdev -gid "$old_gid" -exec chgrp -h "$gid" {} +
fi
install -d -o "$uid" -g "$gid" -m 0755 "$root/home/postgres"

# 2. No cluster of the package's (createcluster.d says so at install; removed
# if one was made anyway): Patroni initialises the data directory.
rm -rf "$root"/var/lib/postgresql/*/main "$root"/etc/postgresql/*/main

# 3. The socket directory: mmdebstrap's cleanup of /run is skipped so that
# /run/postgresql (/var/run/postgresql, the sockets' default) stays; and
# /run/certs (Spilo's $RW_DIR/certs), where pgloop instance makes
# PostgreSQL's certificate when the pod mounts none.
find "$root/run" -mindepth 1 -maxdepth 1 ! -name postgresql -exec rm -rf {} +
install -d -o "$uid" -g "$gid" -m 2775 "$root/run/postgresql"
install -d -o "$uid" -g "$gid" -m 0700 "$root/run/certs"

# 4. What would differ between builds: ssl-cert's random snakeoil key pair
# (pgloop's pods bring their own certificates), the host's resolv.conf and
# hostname (runtimes mount theirs), backups of dpkg's and debconf's databases,
# logs, the ldconfig's auxiliary cache.
rm -f "$root/etc/ssl/private/ssl-cert-snakeoil.key" "$root/etc/ssl/certs/ssl-cert-snakeoil.pem"
find "$root/etc/ssl/certs" -xtype l -delete
rm -f "$root/etc/resolv.conf" "$root/etc/hostname"
rm -f "$root"/var/lib/dpkg/*-old "$root"/var/cache/debconf/*-old
find "$root/var/log" -type f -delete
rm -f "$root/var/cache/ldconfig/aux-cache"
if [ -e "$root/etc/machine-id" ]; then
	: >"$root/etc/machine-id"
fi
