package build

import (
	"io/fs"
	"syscall"
)

func owner(fi fs.FileInfo) (int, int) {
	st := fi.Sys().(*syscall.Stat_t)
	return int(st.Uid), int(st.Gid)
}
