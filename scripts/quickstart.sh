#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# Installs dependencies, builds, installs and starts llmprofd with its default configuration:
# under systemd when systemd runs the machine, otherwise in the background with a log file.
# `quickstart.sh --stop` stops what it started. Run it as root, or as a user who may sudo:
# it asks sudo for itself (a minimal root shell has no sudo).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ $(id -u) != 0 ]]; then
	exec sudo -- "$0" "$@"
fi

pidfile=/run/llmprofd-quickstart.pid
if [[ ${1:-} == --stop ]]; then
	if [[ -d /run/systemd/system ]]; then
		systemctl stop llmprofd.socket llmprofd.service
	elif [[ -e $pidfile ]]; then
		pid=$(cat "$pidfile")
		# Only the process this script started, and only while it still is llmprofd.
		if [[ $(cat "/proc/$pid/comm" 2>/dev/null) == llmprofd ]]; then
			kill -TERM "$pid"
			for _ in $(seq 200); do
				kill -0 "$pid" 2>/dev/null || break
				sleep 0.1
			done
		fi
		rm -f "$pidfile"
	fi
	exit 0
fi

scripts/install-deps.sh --if-missing
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build
# Also /etc/llmprofd/llmprofd.conf, the example settings, where there is none yet.
cmake --install build
# Members of group llmprof may read every process's profile from the socket.
getent group llmprof >/dev/null || groupadd --system llmprof

if [[ -d /run/systemd/system ]]; then
	systemctl daemon-reload
	systemctl enable --now llmprofd.socket llmprofd.service
	systemctl --no-pager status llmprofd.service
	exit 0
fi

log=/var/log/llmprofd.log
if pgrep -x llmprofd >/dev/null; then
	echo "llmprofd is already running (pid $(pgrep -x llmprofd))"
	exit 0
fi
sbin=$(cmake -L -N build | sed -n 's/^CMAKE_INSTALL_PREFIX:PATH=//p')/sbin
# The previous run's log is kept beside the new one: it says how that run ended.
if [[ -s $log ]]; then
	mv -f "$log" "$log.1"
fi
nohup "$sbin/llmprofd" --foreground >"$log" 2>&1 </dev/null &
echo $! >"$pidfile"
for _ in $(seq 100); do
	if grep -q "ready:" "$log"; then
		cat "$log"
		echo "llmprofd is running (pid $!), logging to $log; try:"
		echo "  curl --unix-socket /run/llmprofd/llmprofd.sock http://localhost/v1/processes"
		exit 0
	fi
	if ! kill -0 $! 2>/dev/null; then
		cat "$log"
		echo "llmprofd failed to start" >&2
		exit 1
	fi
	sleep 0.1
done
echo "llmprofd did not report ready within 10 s; see $log" >&2
exit 1
