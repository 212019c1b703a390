module github.com/corral-sandbox/corral

go 1.26.0

require (
	github.com/containerd/errdefs v1.0.0
	golang.org/x/sys v0.49.0
)
