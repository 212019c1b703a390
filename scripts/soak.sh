#!/usr/bin/env bash
# Soak test: two workers run random operations against a daemon of its own
# (create with and without a pool or a network, exec, rm, fork, fork
# --memory-state, suspend/resume, suspend --filesystem-only and
# auto-resume, pause and auto-resume, snapshot, pool resize, detached
# counters) while the daemon is killed every few seconds (SIGKILL or
# SIGTERM, sometimes again while it recovers) and started again. After each
# restart every sandbox must answer an exec, and no resume or fork may lose
# saved processes; at the end everything is removed and nothing may be
# left: mounts, cgroups, processes, network devices, loop devices,
# per-sandbox run-time files.
#
#   scripts/soak.sh [ROUNDS]     (default 6 rounds, about a minute; root)
#
# It is not part of scripts/test.sh: it is random and takes minutes. It
# needs bin/corral (scripts/build.sh) and the packages of scripts/deps.sh.
set -uo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "run as root: $0 needs root" >&2; exit 1; }
rounds=${1:-6}
bin=$PWD/bin/corral
[ -x "$bin" ] || { echo "no $bin: run scripts/build.sh first" >&2; exit 1; }
dir=$(mktemp -d /tmp/corral-soak.XXXXXX)
cg=corral-soak-$$
cat >"$dir/config.toml" <<EOF
version = 1
root = "$dir/root"
run_dir = "$dir/run"
socket = "$dir/run/corral.sock"
cgroup_parent = "$cg"
EOF
export CORRAL_HOST=unix://$dir/run/corral.sock
links_before=$(ip -o link | awk -F': ' '{print $2}' | sort)
pid=

start() {
	"$bin" serve --config "$dir/config.toml" >>"$dir/serve.log" 2>&1 &
	pid=$!
	for _ in $(seq 200); do "$bin" version >/dev/null 2>&1 && return 0; sleep 0.1; done
	echo "FAIL: the daemon did not start; log: $dir/serve.log" >&2
	exit 1
}

any() { "$bin" ls -q 2>/dev/null | shuf -n1; }

worker() {
	local id
	while :; do
		case $((RANDOM % 12)) in
		0 | 1) id=$("$bin" create --no-pool --image busybox 2>/dev/null) &&
			"$bin" exec "$id" -- sh -c 'echo x > /f' >/dev/null 2>&1
			[ $((RANDOM % 2)) = 0 ] && "$bin" rm -f "$id" >/dev/null 2>&1 ;;
		2) id=$("$bin" create --image busybox 2>/dev/null) && "$bin" rm -f "$id" >/dev/null 2>&1 ;;
		3) id=$("$bin" create --no-pool --image busybox --network allowlist --allow example.org 2>/dev/null) &&
			"$bin" rm -f "$id" >/dev/null 2>&1 ;;
		4) id=$(any) && [ -n "$id" ] && "$bin" fork "$id" >/dev/null 2>&1 ;;
		5) id=$(any) && [ -n "$id" ] && "$bin" suspend "$id" >/dev/null 2>&1 && "$bin" resume "$id" >/dev/null 2>&1 ;;
		6) id=$(any) && [ -n "$id" ] && "$bin" snapshot "$id" >/dev/null 2>&1 ;;
		7) id=$(any) && [ -n "$id" ] && "$bin" fork --memory-state "$id" >/dev/null 2>&1 ;;
		8) "$bin" pool set busybox --size $((RANDOM % 4)) >/dev/null 2>&1 ;;
		9) id=$(any) && [ -n "$id" ] && "$bin" pause "$id" >/dev/null 2>&1 && "$bin" exec "$id" -- true >/dev/null 2>&1 ;;
		10) id=$(any) && [ -n "$id" ] && "$bin" exec --detach "$id" -- sh -c 'while :; do date > /tmp/c; sleep 0.2; done' >/dev/null 2>&1 ;;
		11) id=$(any) && [ -n "$id" ] && "$bin" suspend --filesystem-only "$id" >/dev/null 2>&1 &&
			"$bin" exec "$id" -- true >/dev/null 2>&1 ;;
		esac
	done
}

failed=0
start
for r in $(seq "$rounds"); do
	worker & w1=$!
	worker & w2=$!
	sleep "$((2 + RANDOM % 5)).$((RANDOM % 10))"
	sig=KILL
	[ $((RANDOM % 2)) = 0 ] && sig=TERM
	kill -s "$sig" "$pid"
	kill "$w1" "$w2" 2>/dev/null
	wait "$w1" "$w2" 2>/dev/null
	wait "$pid" 2>/dev/null
	note=""
	if [ $((RANDOM % 2)) = 0 ]; then # killed again while it recovers
		"$bin" serve --config "$dir/config.toml" >>"$dir/serve.log" 2>&1 &
		sleep "0.$((RANDOM % 4))"
		kill -KILL $!
		wait $! 2>/dev/null
		note=", killed again while recovering"
	fi
	start
	n=0 bad=0
	for id in $("$bin" ls -q); do
		n=$((n + 1))
		if ! out=$("$bin" exec "$id" -- true 2>&1); then
			bad=$((bad + 1))
			echo "  $id does not answer: $out"
		fi
	done
	echo "round $r (SIG$sig$note): $n sandboxes after the restart, $bad not answering"
	[ "$bad" = 0 ] || failed=1
done

# A memory checkpoint that was saved must come back (a kill during the
# checkpoint itself may leave none, which is logged as missing instead).
lost=$(grep -c "processes could not be restored" "$dir/serve.log")
[ "$lost" = 0 ] || { echo "FAIL: $lost resumes or forks lost their processes: $(grep -m1 "processes could not be restored" "$dir/serve.log" | grep -o 'error=.*' | cut -c1-300)"; failed=1; }

"$bin" pool rm busybox >/dev/null 2>&1
"$bin" ls -q | xargs -r "$bin" rm -f >/dev/null
"$bin" snapshot ls -q 2>/dev/null | xargs -r "$bin" snapshot rm >/dev/null
left=$("$bin" ls -q | wc -l)
kill "$pid"
wait "$pid" 2>/dev/null

leak() { echo "LEAK: $*"; failed=1; }
[ "$left" = 0 ] || leak "$left sandboxes could not be removed"
m=$(grep -c " $dir/" /proc/self/mountinfo)
[ "$m" = 0 ] || leak "$m mounts under $dir: $(grep " $dir/" /proc/self/mountinfo | awk '{print $5}' | head -5)"
for h in /sys/fs/cgroup /sys/fs/cgroup/*/; do
	[ -d "$h/$cg" ] || continue
	c=$(find "$h/$cg" -mindepth 1 -type d | wc -l)
	[ "$c" = 0 ] || leak "$c cgroups under $h/$cg"
	p=$(find "$h/$cg" -name cgroup.procs -exec cat {} + 2>/dev/null | wc -l)
	[ "$p" = 0 ] || leak "$p processes in $h/$cg"
	rmdir "$h/$cg" 2>/dev/null
done
links=$(comm -13 <(echo "$links_before") <(ip -o link | awk -F': ' '{print $2}' | sort))
[ -z "$links" ] || leak "network devices: $links"
l=$(losetup -a | grep -c "$dir/")
[ "$l" = 0 ] || leak "$l loop devices on files under $dir"
f=$(find "$dir/run" -path '*/sandboxes/*' -o -path '*/state/*' ! -path '*/state/.cache*' | wc -l)
[ "$f" = 0 ] || leak "$f per-sandbox files under $dir/run: $(find "$dir/run" -path '*/sandboxes/*' | head -3)"

if [ "$failed" = 0 ]; then
	echo "soak: $rounds rounds, every sandbox answered after every restart, nothing left behind"
	rm -rf "$dir"
	exit 0
fi
echo "soak: FAILED; the daemon's log and state are in $dir" >&2
exit 1
