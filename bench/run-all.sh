#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# Every benchmark in turn, each printing its result table last. --quick runs each in a
# reduced size, only to show they still work (CI does this); the full sizes are run by hand
# and recorded in bench/RESULTS.md. Needs root, a built tree (build/) and the packages of
# scripts/install-deps.sh. Output also goes to bench/out/NAME.txt.
set -euo pipefail
cd "$(dirname "$0")"
mkdir -p out
if [[ ${1:-} == --quick ]]; then
	runs=(
		"inference.py --rounds 1 --tokens 4 --shapes tiny"
		"sched.py --rounds 1 --loops 20000"
		"syscalls.py --rounds 1 --calls 20000 --trips 2000 --maps 5000"
		"progcost.py --rounds 1"
		"progab.py --rounds 2 --workloads pipe,pingpong"
		"kcost.py --rounds 1 --pairs 2 --tokens 16 --workloads omp"
		"probes.py --rounds 1 --calls 20000"
		"daemon_cost.py --sizes 1,20 --window 1 --repeat 2"
		"ops.py --rounds 1 --tokens 30 --workloads lpops,omp"
		"record.py --rounds 1 --tokens 4 --shape tiny --window 4"
		"record.py --stream --rounds 1 --window 3"
		"apistall.py --windows 2 --seconds 0.5 --links"
		"batch.py --rounds 1 --sizes 32,256 --tokens 4"
		"samplers.py --rounds 1 --iters 3000 --runs 1 --tokens 30"
		"flame.py --pairs 2 --tokens 16 --seconds 10 --procs 1"
		"torch.py --pairs 1 --new 20 --configs default --cycles 1 --hold 2 --interleave 2 --blocks 2"
		"python.py --rounds 1 --seconds 2"
	)
else
	runs=("inference.py" "sched.py" "syscalls.py" "progcost.py" "progab.py" "kcost.py" "probes.py" "daemon_cost.py" "ops.py" "record.py" "record.py --stream" "apistall.py" "batch.py" "samplers.py" "flame.py" "torch.py" "python.py")
fi
for r in "${runs[@]}"; do
	name=${r%%.py*}
	[[ $r == *--stream* ]] && name+=-stream
	echo "== bench/$r"
	# shellcheck disable=SC2086
	python3 $r 2>&1 | tee "out/$name.txt"
done
