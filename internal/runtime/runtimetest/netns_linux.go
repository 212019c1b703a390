package runtimetest

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// checkNetNS returns nil when p is a network namespace other than the
// test's own: a file of nsfs that setns(CLONE_NEWNET) accepts.
func checkNetNS(p string) error {
	var fs unix.Statfs_t
	if err := unix.Statfs(p, &fs); err != nil {
		return err
	}
	if fs.Type != unix.NSFS_MAGIC {
		return fmt.Errorf("%s is not a namespace (file system magic %#x)", p, fs.Type)
	}
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	if t, err := unix.IoctlRetInt(int(f.Fd()), unix.NS_GET_NSTYPE); err != nil || t != unix.CLONE_NEWNET {
		return fmt.Errorf("%s is not a network namespace (type %#x, %v)", p, t, err)
	}
	own, err := os.Stat("/proc/self/ns/net")
	if err != nil {
		return err
	}
	if st, err := f.Stat(); err == nil && os.SameFile(st, own) {
		return fmt.Errorf("%s is the test's own network namespace, not the box's", p)
	}
	return nil
}
