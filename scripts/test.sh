#!/usr/bin/env bash
# The whole test suite: vet, unit tests with the race detector (unprivileged
# tier), then the privileged and integration tiers that create real sandboxes
# on this machine, and the reliability soak (scripts/soak.sh --cycles). Needs
# root for the second part.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
[ "$(id -u)" = 0 ] || { echo "run as root: $0 needs root (the privileged tier creates real sandboxes)" >&2; exit 1; }
echo "== system packages"
scripts/deps.sh
echo "== go vet"
go vet ./...
go vet -tags integration ./...
echo "== gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go'))
[ -z "$unformatted" ] || { echo "gofmt needed on: $unformatted" >&2; exit 1; }
echo "== unit tests (race detector, unprivileged)"
go test -race -count=1 ./...
echo "== privileged + integration tests (real sandboxes)"
CORRAL_TEST_PRIVILEGED=1 go test -count=1 -p 1 -timeout 30m -tags integration ./...
echo "== reliability soak: 500 cycles, the daemon SIGKILLed every 100"
scripts/build.sh
scripts/soak.sh --cycles 500 --kill-every 100
