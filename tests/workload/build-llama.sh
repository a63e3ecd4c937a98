#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# Builds llama.cpp's llama-simple and llama-server from source with their defaults (OpenMP
# on, native CPU flags, static: -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF; the server without
# its web UI, which would be downloaded), from the git bundle that the pinned
# node-llama-cpp ships, so that tests and benchmarks run the builds most people run.
#
#   build-llama.sh [--cc gcc|clang] [--server | --eval-callback]
#
# The build (about 6 minutes on 2 cores, 8 with the server) is cached by the bundle's
# commit and the compiler under ${LLMPROF_LLAMA_CACHE:-/var/cache/llmprof-llama}; prints
# the path of llama-simple, or of llama-server with --server, or of llama-eval-callback
# (which prints every op of the graph it computes: a reference for tests) with
# --eval-callback: each links the libraries the first build made, in seconds.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bundle="$here/node_modules/node-llama-cpp/llama/gitRelease.bundle"
cache="${LLMPROF_LLAMA_CACHE:-/var/cache/llmprof-llama}"
cc=gcc
target=llama-simple
while [[ $# -gt 0 ]]; do
	case $1 in
	--cc) cc=$2; shift 2 ;;
	--server) target=llama-server; shift ;;
	--eval-callback) target=llama-eval-callback; shift ;;
	*) echo "build-llama: unknown argument '$1'" >&2; exit 2 ;;
	esac
done
case $cc in
gcc) cxx=g++ ;;
clang) cxx=clang++ ;;
*) echo "build-llama: --cc gcc or clang" >&2; exit 2 ;;
esac
if [[ ! -f $bundle ]]; then
	echo "build-llama: $bundle is missing: run 'npm install --no-save' in tests/workload" >&2
	exit 1
fi
# A CPU that reports AMX (cpuid) on a kernel that does not let processes use its tile
# data (ARCH_GET_XCOMP_SUPP without XTILEDATA, bit 18: a hypervisor keeps it out of XCR0):
# -march=native compiles ggml's AMX kernels in, ggml's own check (ARCH_REQ_XCOMP_PERM)
# passes anyway, and the first matmul dies of SIGILL at ldtilecfg. Such a host gets a
# build without AMX, in a directory of its own (gcc and clang let -mno-amx-* override
# what -march=native enables, wherever it stands on the command line).
amx_unusable() {
	grep -qw amx_tile /proc/cpuinfo || return 1
	python3 -c '
import ctypes, sys
mask = ctypes.c_ulong(0)
r = ctypes.CDLL(None).syscall(158, 0x1022, ctypes.byref(mask))  # arch_prctl(ARCH_GET_XCOMP_SUPP)
sys.exit(0 if r == 0 and not (mask.value >> 18) & 1 else 1)'
}
flags=()
suffix=
if amx_unusable; then
	no_amx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
	flags=(-DCMAKE_C_FLAGS="$no_amx" -DCMAKE_CXX_FLAGS="$no_amx")
	suffix=-noamx
	echo "build-llama: the CPU has AMX but the kernel does not let processes use it: built without" >&2
fi
commit=$(git bundle list-heads "$bundle" | awk 'NR == 1 { print substr($1, 1, 12) }')
dir="$cache/$commit-$cc$suffix"
bin="$dir/build/bin/$target"
# A target counts as built once its stamp is there: an interrupted build is finished by the
# next call (cmake picks up where it stopped), never taken for a cached one.
if [[ -x $bin && -e $dir/.built-$target ]]; then
	echo "$bin"
	exit 0
fi
mkdir -p "$cache"
if [[ ! -e $dir/.cloned ]]; then
	rm -rf "$dir"
	git clone -q "$bundle" "$dir" 2>/dev/null
	touch "$dir/.cloned"
fi
# The compiler's output (tens of thousands of lines of warnings) goes to a log, shown
# (its errors) on failure: the suite's own progress stays readable.
log=$dir/build-$target.log
echo "build-llama: building $target (log: $log)" >&2
if ! { CC=$cc CXX=$cxx cmake -S "$dir" -B "$dir/build" -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF \
	-DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF "${flags[@]}" &&
	cmake --build "$dir/build" --target "$target" -j"$(nproc)"; } >"$log" 2>&1; then
	grep -E "error|Error" "$log" | tail -20 >&2
	echo "build-llama: the build failed; its whole output is in $log" >&2
	exit 1
fi
touch "$dir/.built-$target"
echo "$bin"
