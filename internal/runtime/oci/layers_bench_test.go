package oci

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/snapshot/overlay"
)

// BenchmarkStartLayers measures Prepare + Create + Start + Delete + Remove
// of a box whose root is an overlay of 1 or 20 read-only layers (the busybox
// root at the bottom, a file per layer above it). Layers are shared, never
// copied per sandbox, so the two should cost the same; compare the
// sub-benchmarks' ns/op (`go test -bench StartLayers`).
func BenchmarkStartLayers(b *testing.B) {
	for _, n := range []int{1, 20} {
		b.Run(fmt.Sprintf("layers=%d", n), func(b *testing.B) {
			r := newTestRuntime(b, "crun", WithProcessArgs("/bin/true"))
			if _, err := exec.LookPath("mkfs.ext4"); err != nil {
				b.Skip("mkfs.ext4 not installed (apt-get install e2fsprogs)")
			}
			ctx := context.Background()
			store, err := overlay.New(b.TempDir(), overlay.WithDefaultDiskBytes(64<<20), overlay.WithPoolSize(4))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { store.Close() })
			base := busyboxRootfs(b)
			parent := ""
			for i := range n {
				key := fmt.Sprintf("l%d", i)
				err := store.CreateLayer(ctx, key, parent, func(dir string) error {
					if i == 0 {
						return exec.Command("cp", "-a", base+"/.", dir).Run()
					}
					return os.WriteFile(filepath.Join(dir, key), []byte(key), 0o644)
				})
				if err != nil {
					b.Fatal(err)
				}
				parent = key
			}
			spec := testSpec(b, defaultResources)
			for i := 0; b.Loop(); i++ {
				id := fmt.Sprintf("layers-%d", i)
				ms, err := store.Prepare(ctx, id, parent, sandbox.PrepareOpts{})
				if err != nil {
					b.Fatal(err)
				}
				spec.Rootfs = ms
				if err := r.Create(ctx, id, spec); err != nil {
					b.Fatal(err)
				}
				if err := r.Start(ctx, id); err != nil {
					b.Fatal(err)
				}
				if err := r.Delete(ctx, id); err != nil {
					b.Fatal(err)
				}
				if err := store.Remove(ctx, id); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
