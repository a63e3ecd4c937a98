#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# Builds llama.cpp's llama-simple from source with its defaults (OpenMP on, native CPU
# flags, static: -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF), from the git bundle that the
# pinned node-llama-cpp ships, so that tests and benchmarks run the build most people run.
# The build (about 6 minutes on 2 cores) is cached by the bundle's commit under
# ${LLMPROF_LLAMA_CACHE:-/var/cache/llmprof-llama}; prints the path of llama-simple.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bundle="$here/node_modules/node-llama-cpp/llama/gitRelease.bundle"
cache="${LLMPROF_LLAMA_CACHE:-/var/cache/llmprof-llama}"
if [[ ! -f $bundle ]]; then
	echo "build-llama: $bundle is missing: run 'npm install --no-save' in tests/workload" >&2
	exit 1
fi
commit=$(git bundle list-heads "$bundle" | awk 'NR == 1 { print substr($1, 1, 12) }')
dir="$cache/$commit"
bin="$dir/build/bin/llama-simple"
if [[ -x $bin ]]; then
	echo "$bin"
	exit 0
fi
mkdir -p "$cache"
rm -rf "$dir.tmp"
git clone -q "$bundle" "$dir.tmp" 2>/dev/null
cmake -S "$dir.tmp" -B "$dir.tmp/build" -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF >&2
cmake --build "$dir.tmp/build" --target llama-simple -j"$(nproc)" >&2
# Moved into place only once built: an interrupted build is never taken for a cached one.
rm -rf "$dir"
mv "$dir.tmp" "$dir"
echo "$bin"
