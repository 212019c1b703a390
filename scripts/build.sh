#!/usr/bin/env bash
# Builds the static corral binary into bin/corral.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
command -v go >/dev/null || { echo "go is not installed: install Go >= 1.25 (https://go.dev/dl) and retry" >&2; exit 1; }
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X github.com/corral-sandbox/corral/internal/version.Version=$(git describe --always --dirty 2>/dev/null || echo dev)" -o bin/corral ./cmd/corral
echo "built bin/corral"
