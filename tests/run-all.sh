#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# The whole test suite: format check, then every tier (unit, bpf, e2e) in a normal build and
# again under AddressSanitizer + UndefinedBehaviorSanitizer. Needs root for the bpf tier.
set -euo pipefail
cd "$(dirname "$0")/.."

# The bpf and e2e tiers load BPF programs: root, or a user who may sudo.
if [[ $(id -u) != 0 ]]; then
	command -v sudo >/dev/null || {
		echo "run-all: run as root: the bpf and e2e tiers load BPF programs" >&2
		exit 1
	}
	exec sudo --preserve-env=LLMPROF_FUZZ_SECONDS -- "$0" "$@"
fi
scripts/install-deps.sh --if-missing
# Real llama.cpp for the e2e tier: node-llama-cpp, CPU build only, pinned by the lockfile.
if [[ ! -e tests/workload/node_modules/.package-lock.json ||
	tests/workload/package-lock.json -nt tests/workload/node_modules/.package-lock.json ]]; then
	echo "== npm install (tests/workload, as locked; see .ci/run)"
	(cd tests/workload && npm install --no-save)
fi

# Real llama.cpp built from source with its defaults (OpenMP): about 6 minutes the first
# time, then cached by commit (tests/workload/build-llama.sh).
echo "== llama.cpp from source (cached)"
llama_simple=$(tests/workload/build-llama.sh)
echo "$llama_simple"
# llama-eval-callback, test_graph's reference: the same build's libraries, linked.
tests/workload/build-llama.sh --eval-callback

# ik_llama.cpp's llama-cli (the engine of seeds/000), from the snapshot in ../shared/workloads:
# about 10 minutes the first time, then cached by the snapshot's hash.
echo "== ik_llama.cpp from source (cached)"
bash ../shared/workloads/build-ik.sh

echo "== clang-format, SPDX lines, the daemon's floor plan"
clang-format --dry-run --Werror $(git ls-files '*.c' '*.h')
scripts/check-spdx.sh
scripts/check-layout.py

# Scratch that passing tests leave behind in /tmp (they remove theirs; a failing one keeps
# it for inspection and fails the run anyway).
scratch() { find /tmp /var/tmp -maxdepth 1 \( -name 'llmprof*' -o -name 'lpfixture-*' -o \
	-name 'lpggml-*' -o -name 'lpwebcfg-*' -o -name 'fuzz_http.*' \) 2>/dev/null | sort; }
scratch >"${TMPDIR:-/tmp}/.run-all-scratch-before"

# A build's output goes to DIR/build.log, shown whole when it fails (-Werror: a warning
# fails it too).
build() {
	cmake -S . -B "$1" -G Ninja "${@:2}" >/dev/null
	if ! cmake --build "$1" >"$1/build.log" 2>&1; then
		cat "$1/build.log" >&2
		exit 1
	fi
}
# ctest prints a failed test's whole output, which can run to hundreds of lines: its failed
# checks are repeated last, where a log cut to its tail still shows them.
tier() {
	ctest --test-dir "$1" --output-on-failure && return
	echo "== failed checks in $1 (the lines above hold each test's whole output)" >&2
	awk '/^[0-9]+\/[0-9]+ Testing: /{name=$3; n=0}
		/^(ok: )/{next} /FAILED: |Timeout|Error: /{lines[n++]=name": "$0}
		/^Test Failed/{for(i=0;i<n;i++) print lines[i]}' \
		"$1/Testing/Temporary/LastTest.log" | cut -c1-600 | tail -40 >&2
	exit 1
}
echo "== build"
build build -DCMAKE_BUILD_TYPE=RelWithDebInfo
echo "== tests"
tier build

echo "== build with AddressSanitizer and UndefinedBehaviorSanitizer"
build build-asan -DCMAKE_BUILD_TYPE=Debug -DLLMPROF_SANITIZE=ON
echo "== tests under the sanitizers"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
tier build-asan

left=$(scratch | comm -13 "${TMPDIR:-/tmp}/.run-all-scratch-before" -)
rm -f "${TMPDIR:-/tmp}/.run-all-scratch-before"
if [[ -n $left ]]; then
	echo "run-all: the tests passed but left scratch behind:" >&2
	echo "$left" >&2
	exit 1
fi

# The HTTP stack under libFuzzer for a bounded time (LLMPROF_FUZZ_SECONDS, default 60), from
# the seed requests; a crash or a broken invariant fails the run and leaves the input in
# build-fuzz/.
echo "== libFuzzer: tests/fuzz/fuzz_http for ${LLMPROF_FUZZ_SECONDS:-60} s"
# A fuzzer's progress lines go to build-fuzz/NAME.log; its last lines are shown, all of it
# on a failure.
fuzz() {
	local name=$1 log=build-fuzz/$1.log
	shift
	if ! (cd build-fuzz && "./$name" "$@") >"$log" 2>&1; then
		cat "$log" >&2
		echo "run-all: $name failed; its output is in $log" >&2
		exit 1
	fi
	grep -E "^stat::number_of_executed_units|^Done " "$log" || tail -2 "$log"
}
CC=clang cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=Debug -DLLMPROF_FUZZ=ON >/dev/null
cmake --build build-fuzz --target fuzz_http >/dev/null
mkdir -p build-fuzz/corpus
fuzz fuzz_http -max_total_time="${LLMPROF_FUZZ_SECONDS:-60}" -rss_limit_mb=4096 \
	-print_final_stats=1 corpus ../tests/fuzz/seeds
# The .eh_frame parser (other users' binaries) for half that time, from real sections.
echo "== libFuzzer: tests/fuzz/fuzz_cfi for $((${LLMPROF_FUZZ_SECONDS:-60} / 2)) s"
cmake --build build-fuzz --target fuzz_cfi >/dev/null
mkdir -p build-fuzz/cfi-corpus build-fuzz/cfi-seeds
for f in build/tests/lpops build/tests/lpfixture "$(cc -print-file-name=libc.so.6)"; do
	objcopy -O binary --only-section=.eh_frame "$f" "build-fuzz/cfi-seeds/$(basename "$f")"
done
fuzz fuzz_cfi -max_total_time="$((${LLMPROF_FUZZ_SECONDS:-60} / 2))" \
	-rss_limit_mb=4096 -print_final_stats=1 cfi-corpus cfi-seeds
# The GGUF header reader (other users' model files) for half that time, from small models.
echo "== libFuzzer: tests/fuzz/fuzz_gguf for $((${LLMPROF_FUZZ_SECONDS:-60} / 2)) s"
cmake --build build-fuzz --target fuzz_gguf >/dev/null
mkdir -p build-fuzz/gguf-corpus build-fuzz/gguf-seeds
python3 tests/workload/gen_gguf.py --shape tiny build-fuzz/gguf-seeds/tiny.gguf
fuzz fuzz_gguf -max_total_time="$((${LLMPROF_FUZZ_SECONDS:-60} / 2))" \
	-rss_limit_mb=4096 -max_len=1048576 -print_final_stats=1 gguf-corpus gguf-seeds
# CPython's location tables and file names (other users' processes) for a quarter of it.
echo "== libFuzzer: tests/fuzz/fuzz_pycode for $((${LLMPROF_FUZZ_SECONDS:-60} / 4)) s"
cmake --build build-fuzz --target fuzz_pycode >/dev/null
mkdir -p build-fuzz/pycode-corpus
fuzz fuzz_pycode -max_total_time="$((${LLMPROF_FUZZ_SECONDS:-60} / 4))" \
	-rss_limit_mb=4096 -print_final_stats=1 pycode-corpus

# Every benchmark in a reduced size, so that they keep working; the full sizes are run by
# hand (bench/run-all.sh) and recorded in bench/RESULTS.md. Not timed assertions: they print.
echo "== bench/run-all.sh --quick"
bench/run-all.sh --quick
