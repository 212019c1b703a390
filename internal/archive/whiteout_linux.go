package archive

import "golang.org/x/sys/unix"

// mknodWhiteout creates the overlayfs whiteout base (a character device 0/0,
// mode 0) in the directory dirfd.
func mknodWhiteout(dirfd int, base string) error {
	return unix.Mknodat(dirfd, base, unix.S_IFCHR, 0)
}
