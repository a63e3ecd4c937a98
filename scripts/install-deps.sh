#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# Installs what building, running and testing llmprofd needs, from Debian's packages
# (nodejs with its npm runs the real llama.cpp workload: tests/workload; curl, prometheus,
# systemd and libclang-rt-dev serve the e2e tests and the libFuzzer target; libncurses-dev
# builds llmprofctl's top, and tmux, groff-base, man-db, zsh and fish test it, its man pages
# and its completions;
# linux-perf, libbpf-tools and bpftrace are what bench/ compares llmprofd with; libomp-dev is
# LLVM's OpenMP runtime, which llama.cpp built with clang uses: tests/e2e/test_engines.py;
# protobuf-compiler and python3-protobuf decode the Perfetto traces in tests/lib/tracefmt.py;
# strace holds llama-eval-callback's exit until its logger has printed: tests/e2e/test_graph.py;
# libc6-dev's libc.a links tests/fixtures/lpheld.c static; libiberty-dev's demangler names
# profiles' C++ frames as perf does; golang-go's `go tool pprof` and chromium read what
# tests/e2e/test_flame.py pulls; debootstrap, systemd-container and dpkg-dev make the
# Debian root filesystem, boot it and build the .deb that tests/system/ installs there;
# python3-yaml reads deploy/'s manifests; python3-torch is the PyTorch stack tests/e2e/test_torch*.py
# profiles, its GEMMs in the reference BLAS (libblas3) or OpenBLAS's OpenMP build
# (libopenblas0-openmp), each in a folder of its own that a process's library path picks).
# With --if-missing, does nothing when every package is already installed; with --list,
# prints the packages instead.
set -euo pipefail

PACKAGES=(
	cmake ninja-build pkg-config gcc g++ libc6-dev clang llvm clang-format git
	libbpf-dev bpftool libelf-dev zlib1g-dev
	libevent-dev libsystemd-dev libcjson-dev libinih-dev libssl-dev libyaml-dev libcrypt-dev
	libseccomp-dev iproute2
	openssl
	curl prometheus systemd libclang-rt-dev
	libncurses-dev tmux groff-base man-db zsh fish
	linux-perf libbpf-tools bpftrace libomp-dev
	python3 util-linux binutils nodejs
	protobuf-compiler python3-protobuf strace
	libiberty-dev golang-go chromium
	debootstrap systemd-container dpkg-dev python3-yaml
	python3-torch libblas3 libopenblas0-openmp
)

if [[ ${1:-} == --list ]]; then
	echo "${PACKAGES[@]}"
	exit 0
fi

all_installed() {
	local p
	for p in "${PACKAGES[@]}"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || return 1
	done
}

if [[ ${1:-} == --if-missing ]] && all_installed; then
	exit 0
fi

if [[ $(id -u) != 0 ]]; then
	echo "install-deps: run as root (apt-get install)" >&2
	exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${PACKAGES[@]}"
