package mount

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestFreeLoops: the free loop devices are those without a backing file,
// lowest first; other block devices are not loop devices.
func TestFreeLoops(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"loop0/loop", "loop1", "loop10", "loop2/loop", "loop3", "sda", "loopx", "zram0"} {
		os.MkdirAll(filepath.Join(root, d), 0o755)
	}
	os.WriteFile(filepath.Join(root, "loop0/loop/backing_file"), []byte("/img\n"), 0o644)
	got, err := freeLoops(root)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{1, 2, 3, 10}; !slices.Equal(got, want) {
		t.Errorf("freeLoops = %v; want %v", got, want)
	}
	// Nothing beyond the reserve: loop-control is not even opened.
	if n, err := trimLoops(root, filepath.Join(root, "no-loop-control"), 4); n != 0 || err != nil {
		t.Errorf("trimLoops with 4 free and 4 kept = %d, %v; want 0, nil", n, err)
	}
	if _, err := trimLoops(root, filepath.Join(root, "no-loop-control"), 2); err == nil {
		t.Errorf("trimLoops beyond the reserve without loop-control succeeded")
	}
}
