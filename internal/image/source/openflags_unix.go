//go:build unix

package source

import "golang.org/x/sys/unix"

// openFlags are added when opening files from a source: O_NONBLOCK keeps
// a FIFO planted in its place from blocking the open (checkRegular then
// rejects it); it has no effect on regular files.
const openFlags = unix.O_NONBLOCK
