#!/usr/bin/env bash
# Installs the Debian packages Corral needs at run time and for its tests.
# Idempotent; needs root. Go itself is expected at /usr/local/go or on PATH.
set -euo pipefail
packages=(
	crun runc            # OCI runtimes (crun is the default)
	busybox-static       # the tiny built-in "busybox" image
	bubblewrap           # benchmark peer (corral bench)
	e2fsprogs            # mkfs.ext4 for each sandbox's size-limited writable disk
	debootstrap debian-archive-keyring   # corral image bootstrap debian:SUITE
	util-linux iproute2 procps psmisc kmod ca-certificates
	curl openssl         # network integration tests: clients inside boxes (host image)
)
missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
	export DEBIAN_FRONTEND=noninteractive
	apt-get update
	apt-get install -y --no-install-recommends "${missing[@]}"
fi
# Loop devices back each sandbox's disk; make sure the driver is there.
[ -e /dev/loop-control ] || modprobe loop 2>/dev/null || true
if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
	echo "note: add /usr/local/go/bin to PATH" >&2
fi
