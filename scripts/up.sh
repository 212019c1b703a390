#!/usr/bin/env bash
# Quick start: install what Corral needs, build it, install it as
# /usr/local/bin/corral and start `corral serve` on its built-in defaults
# (state in /var/lib/corral, API on unix:///run/corral/corral.sock).
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "run as root: $0 needs root" >&2; exit 1; }
scripts/deps.sh
scripts/build.sh
install -m 0755 bin/corral /usr/local/bin/corral
# Restart a daemon that an earlier run started.
if [ -f /run/corral/serve.pid ] && kill -0 "$(cat /run/corral/serve.pid)" 2>/dev/null; then
	kill "$(cat /run/corral/serve.pid)"
	for _ in $(seq 100); do kill -0 "$(cat /run/corral/serve.pid)" 2>/dev/null || break; sleep 0.1; done
fi
mkdir -p /run/corral /var/log
setsid /usr/local/bin/corral serve >>/var/log/corral.log 2>&1 </dev/null &
echo $! >/run/corral/serve.pid
for _ in $(seq 200); do
	if /usr/local/bin/corral version >/dev/null 2>&1; then
		echo "corral serve is running (pid $(cat /run/corral/serve.pid), log /var/log/corral.log)"
		echo "try: corral run -- echo hello"
		exit 0
	fi
	sleep 0.1
done
echo "corral serve did not become ready; see /var/log/corral.log" >&2
tail -n 20 /var/log/corral.log >&2 || true
exit 1
