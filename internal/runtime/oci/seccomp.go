package oci

import (
	goruntime "runtime"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// errnoEPERM and errnoENOSYS are the errno values returned by denied calls.
var (
	errnoEPERM  = uint(1)
	errnoENOSYS = uint(38)
)

// cloneNewUser is CLONE_NEWUSER.
const cloneNewUser = 0x10000000

// deniedSyscalls fail with EPERM. The profile is a denylist (default
// allow): every call a box has no business making without the capabilities
// it lacks, plus the ones that have been the way out of containers (keyring,
// bpf, perf, userfaultfd, io_uring, the new mount API, handle-based opens).
// An allowlist in the style of moby's profile is stricter; this list is what
// we can keep correct without tracking every new syscall, and the dropped
// capabilities already stop most of the rest. Names unknown on an
// architecture are ignored by crun and runc.
var deniedSyscalls = []string{
	"acct", "add_key", "bpf", "clock_adjtime", "clock_settime", "create_module",
	"delete_module", "finit_module", "fsconfig", "fsmount", "fsopen", "fspick",
	"get_kernel_syms", "init_module", "io_uring_enter",
	"io_uring_register", "io_uring_setup", "ioperm", "iopl", "kcmp",
	"kexec_file_load", "kexec_load", "keyctl", "lookup_dcookie",
	"mount", "mount_setattr", "move_mount", "move_pages", "migrate_pages",
	"name_to_handle_at", "nfsservctl", "open_by_handle_at", "open_tree",
	"perf_event_open", "pivot_root", "process_vm_readv", "process_vm_writev",
	"ptrace", "query_module", "quotactl", "quotactl_fd", "reboot",
	"request_key", "setns", "settimeofday", "stime",
	"swapoff", "swapon", "sysfs", "syslog", "_sysctl", "umount", "umount2",
	"unshare", "uselib", "userfaultfd", "ustat", "vm86", "vm86old", "vhangup",
}

// seccompArchs lists the native architecture and its compat ones, so that a
// denied call cannot be made through the 32-bit entry points.
func seccompArchs() []specs.Arch {
	switch goruntime.GOARCH {
	case "amd64":
		return []specs.Arch{specs.ArchX86_64, specs.ArchX86, specs.ArchX32}
	case "arm64":
		return []specs.Arch{specs.ArchAARCH64, specs.ArchARM}
	case "riscv64":
		return []specs.Arch{specs.ArchRISCV64}
	case "ppc64le":
		return []specs.Arch{specs.ArchPPC64LE}
	case "s390x":
		return []specs.Arch{specs.ArchS390X, specs.ArchS390}
	}
	return nil
}

// seccompProfile is the default seccomp filter: allow by default, EPERM for
// deniedSyscalls and for clone(CLONE_NEWUSER), ENOSYS for clone3 (whose
// flags live in memory a filter cannot read, so libc falls back to clone,
// which the argument filter checks). Personality is not filtered.
func seccompProfile() *specs.LinuxSeccomp {
	// clone's flags are argument 0 everywhere except s390, where they are
	// argument 1.
	flagsArg := uint(0)
	if goruntime.GOARCH == "s390x" {
		flagsArg = 1
	}
	return &specs.LinuxSeccomp{
		DefaultAction: specs.ActAllow,
		Architectures: seccompArchs(),
		Syscalls: []specs.LinuxSyscall{
			{Names: deniedSyscalls, Action: specs.ActErrno, ErrnoRet: &errnoEPERM},
			{Names: []string{"clone3"}, Action: specs.ActErrno, ErrnoRet: &errnoENOSYS},
			{
				Names:    []string{"clone"},
				Action:   specs.ActErrno,
				ErrnoRet: &errnoEPERM,
				Args: []specs.LinuxSeccompArg{{
					Index: flagsArg, Value: cloneNewUser, ValueTwo: cloneNewUser, Op: specs.OpMaskedEqual,
				}},
			},
		},
	}
}
