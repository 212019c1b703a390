// Package osthread runs code on an OS thread of its own, for work that
// changes the thread's namespaces or cgroups (setns, unshare) and must not
// leak those changes into the rest of the process.
//
// The Go runtime cannot end the process's main thread: a goroutine locked
// to it that exits leaves the thread parked for ever, still in whatever
// namespace it joined, and /proc/<pid> (so /proc/self) shows the main
// thread's namespaces and cgroups as the whole process's. Every function
// here therefore keeps clear of the main thread.
package osthread
