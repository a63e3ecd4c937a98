#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# A Debian 12 root filesystem from Debian's packages alone (debootstrap): systemd, and the
# libraries llmprofd's .deb depends on. The system tier boots it (tests/system/), and
# deploy/Containerfile's image is it with the .deb installed.
#
#   mkrootfs.sh DIR                    make DIR, or keep it when it was made from the same
#                                      package list (DIR/.llmprof-rootfs holds the list's hash)
#   mkrootfs.sh --deb FILE DIR         then install the .deb into it (apt, offline)
#   mkrootfs.sh --deb FILE --tar OUT DIR   and pack it as OUT, for deploy/Containerfile
#
# The mirror is the host's first Debian one (its apt sources), or $LLMPROF_DEBIAN_MIRROR:
# where the host has none, it says so and stops.
set -euo pipefail

# systemd as PID 1 with its journal and D-Bus; procps, passwd and util-linux (runuser) for
# what an administrator types; the .deb's Depends (dpkg-deb -f llmprofd_*.deb Depends); and
# libgomp1 and libstdc++6, which llama.cpp's builds (OpenMP) need to run there.
PACKAGES=(
	systemd systemd-sysv dbus init-system-helpers procps passwd util-linux
	libbpf1 libcjson1 libcrypt1 libelf1 libevent-2.1-7 libevent-openssl-2.1-7 libinih1
	libncursesw6 libssl3 libsystemd0 libtinfo6 libyaml-0-2 zlib1g
	libgomp1 libstdc++6
)
SUITE=bookworm

deb=
tar=
while [[ $# -gt 1 ]]; do
	case $1 in
	--deb) deb=$(realpath "$2"); shift 2 ;;
	--tar) tar=$(realpath -m "$2"); shift 2 ;;
	*) echo "mkrootfs: unknown argument '$1'" >&2; exit 2 ;;
	esac
done
if [[ $# -ne 1 ]]; then
	echo "usage: mkrootfs.sh [--deb FILE [--tar OUT]] DIR" >&2
	exit 2
fi
dir=$(realpath -m "$1")
if [[ $(id -u) != 0 ]]; then
	echo "mkrootfs: run as root (debootstrap, chroot)" >&2
	exit 1
fi
for tool in debootstrap chroot; do
	command -v "$tool" >/dev/null || {
		echo "mkrootfs: $tool is missing (apt install debootstrap)" >&2
		exit 1
	}
done

# The host's first Debian mirror, from its apt sources (deb822 .sources files, then the
# one-line lists), or $LLMPROF_DEBIAN_MIRROR; no host is assumed.
mirror() {
	if [[ -n ${LLMPROF_DEBIAN_MIRROR:-} ]]; then
		echo "$LLMPROF_DEBIAN_MIRROR"
		return
	fi
	local uri
	uri=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null |
		awk '/^URIs:/ { for (i = 2; i <= NF; i++) if ($i ~ /\/debian\/?$/) { print $i; exit } }')
	[[ -n $uri ]] || uri=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
		awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z+]+:\/\/.*\/debian\/?$/) { print $i; exit } }')
	if [[ -z $uri ]]; then
		echo "mkrootfs: no Debian mirror in this host's apt sources (/etc/apt/sources.list.d/*.sources, /etc/apt/sources.list); set LLMPROF_DEBIAN_MIRROR to one, e.g. the URI apt uses here" >&2
		return 1
	fi
	echo "$uri"
}

key=$(printf '%s\n' "$SUITE" "${PACKAGES[@]}" | sha256sum | cut -c1-16)
if [[ $(cat "$dir/.llmprof-rootfs" 2>/dev/null) != "$key" ]]; then
	rm -rf "$dir" "$dir.partial"
	mkdir -p "$(dirname "$dir")"
	log="$(dirname "$dir")/debootstrap.log"
	url=$(mirror)
	echo "mkrootfs: debootstrap $SUITE from $url into $dir (log: $log)" >&2
	include=$(IFS=,; echo "${PACKAGES[*]}")
	if ! debootstrap --variant=minbase --include="$include" "$SUITE" "$dir.partial" \
		"$url" >"$log" 2>&1; then
		tail -20 "$log" >&2
		echo "mkrootfs: debootstrap failed; see $log" >&2
		exit 1
	fi
	# A machine id is made at first boot; the image carries none of its own.
	: >"$dir.partial/etc/machine-id"
	chroot "$dir.partial" apt-get clean
	echo "$key" >"$dir.partial/.llmprof-rootfs"
	mv "$dir.partial" "$dir"
fi

if [[ -n $deb ]]; then
	cp "$deb" "$dir/tmp/"
	# Every dependency is in PACKAGES (apt has the lists debootstrap used, and would
	# fetch one that is not). Not --no-download: apt 2.6 then refuses a local .deb.
	chroot "$dir" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
		--no-install-recommends "/tmp/$(basename "$deb")" >&2
	rm -f "$dir/tmp/$(basename "$deb")"
fi
if [[ -n $tar ]]; then
	tar --numeric-owner --exclude=./.llmprof-rootfs -C "$dir" -cf "$tar" .
fi
echo "$dir"
