#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# Make this machine the busy host users run the suite on: an LLM that keeps decoding
# (node-llama-cpp, a random-weight model, one thread) and a CPU hog, both at nice 19, as a
# user's own jobs beside the suite would be (a build, an engine they try now and then).
# Neither is started by a test, so every test's daemon sees a ggml process it must leave
# out of its judgement, and every timing runs beside load.
#
#   tests/busy-host.sh start    # prints the two pids; state in /run/llmprof-busy-host
#   tests/busy-host.sh stop
set -euo pipefail
cd "$(dirname "$0")/.."
state=/run/llmprof-busy-host
[[ -w /run ]] || state=${TMPDIR:-/tmp}/llmprof-busy-host

stop() {
	[[ -d $state ]] || return 0
	local p
	for p in "$state"/*.pid; do
		[[ -e $p ]] && kill "$(cat "$p")" 2>/dev/null || true
	done
	rm -rf "$state"
}

case ${1:-} in
start)
	stop
	mkdir -p "$state"
	python3 tests/workload/gen_gguf.py --shape tiny "$state/neighbour.gguf" >/dev/null
	[[ -d tests/workload/node_modules/node-llama-cpp ]] || {
		echo "busy-host: node-llama-cpp is not installed: run npm install in tests/workload" >&2
		exit 1
	}
	nice -n 19 node tests/workload/driver.mjs --model "$state/neighbour.gguf" --tokens 64 \
		--threads 1 --forever </dev/null >"$state/neighbour.log" 2>&1 &
	echo $! >"$state/neighbour.pid"
	nice -n 19 bash -c 'while :; do :; done' </dev/null >/dev/null 2>&1 &
	echo $! >"$state/hog.pid"
	# Up only once the engine decodes: its CPU time grows past the model's load.
	for _ in $(seq 100); do
		kill -0 "$(cat "$state/neighbour.pid")" 2>/dev/null || {
			echo "busy-host: the decoding neighbour exited:" >&2
			cat "$state/neighbour.log" >&2
			exit 1
		}
		grep -q libggml-cpu "/proc/$(cat "$state/neighbour.pid")/maps" 2>/dev/null && break
		sleep 0.2
	done
	echo "busy-host: decoding neighbour pid $(cat "$state/neighbour.pid"), hog pid $(cat "$state/hog.pid")"
	;;
stop) stop ;;
*)
	echo "usage: $0 start|stop" >&2
	exit 2
	;;
esac
