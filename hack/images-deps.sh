#!/usr/bin/env bash
# make images-deps: installs what `make images` builds the instance and
# pooler images' root file systems with (docs/images.md): mmdebstrap, and
# apt, which it drives. Does nothing when they are there already.
set -euo pipefail

need=()
command -v mmdebstrap >/dev/null || need+=(mmdebstrap)
command -v apt-get >/dev/null || { echo "images-deps: no apt-get: the images are built from Debian's packages on a Debian host" >&2; exit 1; }
if [ ${#need[@]} -eq 0 ]; then
	exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
	echo "images-deps: missing ${need[*]}; install them as root: apt-get update && apt-get install -y ${need[*]}" >&2
	exit 1
fi
echo "images-deps: installing ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
