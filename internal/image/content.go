package image

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"strings"

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/internal/archive"
)

// Layers are content-addressed: a layer's key is its chain ID (after the
// OCI image spec), which names the layer together with everything beneath
// it, so identical stacks are stored once and shared by every image and
// sandbox that uses them:
//
//	ChainID(L0) = DiffID(L0)
//	ChainID(Ln) = sha256(ChainID(Ln-1) + " " + DiffID(Ln))
//
// The key is "sha256-<hex>" (a file name). A DiffID is the digest of the
// layer as an uncompressed OCI tar: the registry's, verified while pulling,
// or the digest of archive.WriteLayer's deterministic form for layers made
// here (imports, bootstraps, build steps). Built-in layers (the host and
// busybox images) keep their own keys; a layer on top of one chains from
// that key.
const keyPrefix = "sha256-"

// layerKey returns the key of the layer with diffID on the layer parentKey
// ("" for a base layer).
func layerKey(parentKey, diffID string) string {
	if parentKey == "" {
		return keyPrefix + strings.TrimPrefix(diffID, "sha256:")
	}
	parent := parentKey
	if h, ok := strings.CutPrefix(parentKey, keyPrefix); ok {
		parent = "sha256:" + h
	}
	return keyPrefix + sha256Hex(parent+" "+diffID)
}

// validDigest reports whether d is "sha256:" and 64 lowercase hex digits.
func validDigest(d string) error {
	h, ok := strings.CutPrefix(d, "sha256:")
	if !ok || len(h) != 64 || strings.Trim(h, "0123456789abcdef") != "" {
		return fmt.Errorf("digest %q is not sha256:<64 hex digits>: %w", d, errdefs.ErrInvalidArgument)
	}
	return nil
}

// digestTree returns the diff ID of the layer directory dir: the digest of
// its deterministic OCI tar form.
func digestTree(dir string) (string, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return "", err
	}
	defer root.Close()
	return digestRoot(root)
}

func digestRoot(root *os.Root) (string, error) {
	h := sha256.New()
	if err := archive.WriteLayer(h, root, "."); err != nil {
		return "", fmt.Errorf("digest layer: %w", err)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// copyLayer copies the overlay-form tree under src into dst through the
// layer's OCI tar form (every archive.Apply check applies) and returns the
// digest of that form: the new layer's diff ID.
func copyLayer(ctx context.Context, src *os.Root, dst string, opts archive.Options) (string, error) {
	root, err := os.OpenRoot(dst)
	if err != nil {
		return "", err
	}
	defer root.Close()
	h := sha256.New()
	opts.Whiteouts = true
	if err := archive.Copy(ctx, src, ".", root, opts, h); err != nil {
		return "", err
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
