#!/usr/bin/env bash
# Soak tests, two modes, each against a daemon of its own.
#
#   scripts/soak.sh [ROUNDS]
#     Random operations: two workers run random operations (create with
#     and without a pool or a network, exec, rm, fork, fork --memory-state,
#     suspend/resume, suspend --filesystem-only and auto-resume, pause and
#     auto-resume, snapshot, pool resize, detached counters) while the
#     daemon is killed every few seconds (SIGKILL or SIGTERM, sometimes
#     again while it recovers) and started again. After each restart every
#     sandbox must answer an exec, and no resume or fork may lose saved
#     processes; at the end everything is removed and nothing may be left:
#     mounts, cgroups, processes, network devices, loop devices,
#     per-sandbox run-time files. Default 6 rounds, about a minute.
#
#   scripts/soak.sh --cycles N [--kill-every K]
#     Reliability soak (issue 27): N cycles, one operation each, mixing
#     create (+ a first exec), exec, fork, suspend/resume and remove over at
#     most SOAK_MAX_BOXES (8) sandboxes, with the daemon SIGKILLed and
#     started again every K cycles (default 1000); after each restart every
#     sandbox must answer. At the end every sandbox is removed and the host
#     must be back at its starting state, read after a warm-up (see
#     host_state below): MemAvailable within SOAK_MEM_TOLERANCE_MIB (64),
#     SUnreclaim within SOAK_SLAB_TOLERANCE_MIB (16), the same number of
#     memory cgroups (/proc/cgroups, so dying ones count, and the cgroup2
#     root's dying descendants), loop devices, mounts and namespaces, and
#     the daemon's goroutines, open fds and RSS (from its /metrics) back to
#     their level after the warm-up. The host gets up to SOAK_SETTLE (60)
#     seconds after the last removal to come back; the script prints how
#     long it took. scripts/test.sh runs it with 500 cycles, K=100.
#
# Both need root, bin/corral (scripts/build.sh) and the packages of
# scripts/deps.sh.
set -uo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "run as root: $0 needs root" >&2; exit 1; }
rounds=6 cycles=0 kill_every=1000
case "${1:-}" in
--cycles)
	cycles=${2:-}
	[ "${3:-}" = --kill-every ] && kill_every=${4:-} ;;
"") ;;
*) rounds=$1 ;;
esac
for v in rounds cycles kill_every; do
	[[ ${!v} =~ ^[0-9]+$ ]] || { echo "usage: $0 [ROUNDS] | --cycles N [--kill-every K] (${v//_/-} \"${!v}\": want a whole number)" >&2; exit 2; }
done
[ "$kill_every" -gt 0 ] || { echo "--kill-every 0: want at least 1" >&2; exit 2; }
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

# host_state prints what a sandbox may leave on the host, one "name value"
# per line: host memory (KiB), memory cgroups as /proc/cgroups counts them
# (alive and dying) and the cgroup2 root's dying descendants, loop devices,
# mounts, nsfs mounts and namespaces (distinct, of every process), and the
# daemon's goroutines, open fds and RSS (its /metrics).
host_state() {
	awk '$1 == "MemAvailable:" {print "mem_available_kib", $2} $1 == "SUnreclaim:" {print "sunreclaim_kib", $2} $1 == "Cached:" {print "cached_kib", $2}' /proc/meminfo
	awk '$1 == "memory" {print "memory_cgroups", $3}' /proc/cgroups
	local stat=/sys/fs/cgroup/cgroup.stat
	[ -f "$stat" ] || stat=/sys/fs/cgroup/unified/cgroup.stat
	[ -f "$stat" ] && awk '$1 == "nr_dying_descendants" {print "cgroup2_dying", $2}' "$stat"
	echo "loop_devices $(ls /sys/block/loop*/loop/backing_file 2>/dev/null | wc -l)"
	echo "mounts $(wc -l </proc/self/mountinfo)"
	echo "nsfs_mounts $(grep -c ' - nsfs ' /proc/self/mountinfo)"
	echo "namespaces $(find /proc/[0-9]*/ns -maxdepth 1 -type l -printf '%l\n' 2>/dev/null | sort -u | wc -l)"
	curl -sf --unix-socket "$dir/run/corral.sock" http://corral/metrics |
		awk '$1 == "go_goroutines" {print "daemon_goroutines", $2} $1 == "process_open_fds" {print "daemon_fds", $2} $1 == "process_resident_memory_bytes" {printf "daemon_rss_kib %d\n", $2 / 1024}'
}

# state_diff prints the figures of host_state file $2 that are not back at
# their level in file $1: memory within its tolerance, counts at most as
# many, the daemon within a few goroutines, fds and 32 MiB of RSS (its
# allocator returns memory to the host lazily). Cached is informative.
state_diff() {
	awk -v mem="$((${SOAK_MEM_TOLERANCE_MIB:-64} * 1024))" -v slab="$((${SOAK_SLAB_TOLERANCE_MIB:-16} * 1024))" '
	NR == FNR { base[$1] = $2; next }
	{
		b = base[$1]; v = $2; bad = 0
		if ($1 == "mem_available_kib") bad = v < b - mem
		else if ($1 == "sunreclaim_kib") bad = v > b + slab
		else if ($1 == "cached_kib") bad = 0
		else if ($1 == "daemon_goroutines") bad = v > b + 5
		else if ($1 == "daemon_fds") bad = v > b + 2
		else if ($1 == "daemon_rss_kib") bad = v > b + 32768
		else bad = v > b
		if (bad) printf "%s %s (was %s)\n", $1, v, b
	}' "$1" "$2"
}

# settle waits up to SOAK_SETTLE seconds for host_state to be back at the
# level in file $1, writes the last reading to file $2 and prints how many
# seconds it took, or fails.
settle() {
	local start=$SECONDS
	while :; do
		host_state >"$2"
		[ -z "$(state_diff "$1" "$2")" ] && { echo $((SECONDS - start)); return 0; }
		[ $((SECONDS - start)) -ge "${SOAK_SETTLE:-60}" ] && { echo $((SECONDS - start)); return 1; }
		sleep 2
	done
}

# op runs an operation (a command) and prints its output; one that fails is
# reported on stderr and in $dir/failed, and fails the soak.
op() {
	local what=$1 out
	shift
	if ! out=$("$@" 2>&1); then
		echo "  $what failed: $(echo "$out" | tail -1 | cut -c1-300)" | tee -a "$dir/failed" >&2
		return 1
	fi
	printf '%s' "$out"
}

# cycle runs one random operation on the sandboxes in boxes (at most
# SOAK_MAX_BOXES of them).
boxes=()
suspend_args=()
cycle() {
	local n=${#boxes[@]} max=${SOAK_MAX_BOXES:-8} id copy
	[ "$n" -gt 0 ] && id=${boxes[$((RANDOM % n))]}
	local r=$((RANDOM % 10))
	[ "$n" = 0 ] && r=0
	[ "$n" -ge "$max" ] && r=9
	case $r in
	0 | 1 | 2)
		id=$(op create "$bin" create --no-pool --image busybox) || return
		boxes+=("$id")
		op "first exec in $id" "$bin" exec "$id" -- sh -c 'echo x > /f' >/dev/null ;;
	3 | 4) op "exec in $id" "$bin" exec "$id" -- sh -c 'cat /f >/dev/null && echo y >> /f' >/dev/null ;;
	5)
		copy=$(op "fork of $id" "$bin" fork "$id") || return
		boxes+=("$copy")
		op "exec in the fork $copy" "$bin" exec "$copy" -- test -s /f >/dev/null ;;
	6 | 7)
		op "suspend of $id" "$bin" suspend "${suspend_args[@]}" "$id" >/dev/null || return
		op "resume of $id" "$bin" resume "$id" >/dev/null || return
		op "exec after the resume of $id" "$bin" exec "$id" -- test -s /f >/dev/null ;;
	8 | 9)
		op "rm of $id" "$bin" rm -f "$id" >/dev/null || return
		local kept=()
		for b in "${boxes[@]}"; do [ "$b" = "$id" ] || kept+=("$b"); done
		boxes=("${kept[@]}") ;;
	esac
}

# answer checks that every sandbox answers an exec, and prints how many
# do not.
answer() {
	local bad=0
	for id in $("$bin" ls -q); do
		if ! out=$("$bin" exec "$id" -- true 2>&1); then
			bad=$((bad + 1))
			echo "  $id does not answer: $out" >&2
		fi
	done
	echo "$bad"
}

# cycles_main is the reliability soak (--cycles). No warm pool is set, so
# that none of the sandboxes alive at the end is the pool's; the kernel's
# own caches (the image's layers, crun, the agent, the disk template in
# the page cache, dentries and inodes) are filled by a warm-up of each
# operation before the starting state is read, and MemAvailable counts
# the reclaimable ones as available anyway.
cycles_main() {
	local before=$dir/state.before base=$dir/state.base now=$dir/state.now t
	host_state >"$before"
	echo "warm-up: one of each operation, then every sandbox removed"
	for r in 0 3 5 6 9 9; do cycle_fixed "$r"; done
	"$bin" ls -q | xargs -r "$bin" rm -f >/dev/null
	boxes=()
	sync
	if t=$(settle "$before" "$base"); then
		echo "warm-up: kernel figures back at their level before it in ${t}s"
	else
		echo "warm-up: not back at the level before it after ${t}s (the soak compares with after it): $(state_diff "$before" "$base" | paste -sd, -)"
	fi
	host_state >"$base"
	echo "starting state: $(paste -sd' ' "$base")"
	local c kills=0 bad
	for c in $(seq "$cycles"); do
		cycle
		if [ $((c % kill_every)) = 0 ] && [ "$c" -lt "$cycles" ]; then
			kill -KILL "$pid"
			wait "$pid" 2>/dev/null
			kills=$((kills + 1))
			start
			mapfile -t boxes < <("$bin" ls -q)
			bad=$(answer)
			echo "cycle $c: daemon SIGKILLed and started again; ${#boxes[@]} sandboxes, $bad not answering"
			[ "$bad" = 0 ] || failed=1
		fi
	done
	bad=$(answer)
	local opfail
	opfail=$(cat "$dir/failed" 2>/dev/null | wc -l)
	echo "after $cycles cycles ($kills SIGKILLs): $("$bin" ls -q | wc -l) sandboxes, $bad not answering, $opfail operations failed"
	[ "$bad" = 0 ] && [ "$opfail" = 0 ] || failed=1
	"$bin" ls -q | xargs -r "$bin" rm -f >/dev/null
	sync
	if t=$(settle "$base" "$now"); then
		echo "host back at its starting state ${t}s after the last removal: $(paste -sd' ' "$now")"
	else
		echo "LEAK: ${t}s after the last removal, not back at the starting state: $(state_diff "$base" "$now" | paste -sd, -)"
		echo "  now: $(paste -sd' ' "$now")"
		failed=1
	fi
}

# cycle_fixed runs the operation r of cycle (the warm-up's).
cycle_fixed() {
	local n=${#boxes[@]} id
	[ "$n" -gt 0 ] && id=${boxes[$((n - 1))]}
	case $1 in
	0) id=$(op create "$bin" create --no-pool --image busybox) && boxes+=("$id") &&
		op "first exec in $id" "$bin" exec "$id" -- sh -c 'echo x > /f' >/dev/null ;;
	3) op "exec in $id" "$bin" exec "$id" -- true >/dev/null ;;
	5) id=$(op "fork of $id" "$bin" fork "$id") && boxes+=("$id") ;;
	6)
		# Where CRIU cannot restore a box's user namespace the daemon
		# refuses to save processes: the soak then suspends the files only.
		if ! out=$("$bin" suspend "$id" 2>&1); then
			if [[ $out == *"memory state cannot be saved"* ]]; then
				suspend_args=(--filesystem-only)
				echo "warm-up: this host cannot save a box's processes, suspends keep the files only: $(echo "$out" | grep -o 'the sandbox has[^:]*' | head -1)"
				op "suspend of $id" "$bin" suspend "${suspend_args[@]}" "$id" >/dev/null
			else
				echo "  suspend of $id failed: $(echo "$out" | tail -1 | cut -c1-300)" | tee -a "$dir/failed" >&2
			fi
		fi
		op "resume of $id" "$bin" resume "$id" >/dev/null ;;
	9) op "rm of $id" "$bin" rm -f "$id" >/dev/null && unset 'boxes[n-1]' ;;
	esac
}

failed=0
start
if [ "$cycles" -gt 0 ]; then
	cycles_main
else
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
fi

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
	what="$rounds rounds"
	[ "$cycles" = 0 ] || what="$cycles cycles, a SIGKILL every $kill_every"
	echo "soak: $what, every sandbox answered after every restart, nothing left behind"
	rm -rf "$dir"
	exit 0
fi
echo "soak: FAILED; the daemon's log and state are in $dir" >&2
exit 1
