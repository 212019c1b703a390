package network

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Attribution: the proxy accepts a box's connection in the box's namespace,
// so the peer address is the box's own socket. Its inode comes from the
// box's socket table (/proc/<PID 1>/net/tcp or udp: the box's namespace),
// and the process that holds it from the file descriptors of PID 1's
// descendants. The exec is the agent's direct child that process descends
// from: the command the agent started (its pid is the one `corral exec
// --detach` and `corral ps` show). Everything read here was written by the
// box's processes (their command lines): it is recorded as text, never
// interpreted.

// maxCommand bounds a recorded command line.
const maxCommand = 256

// attribute finds the process (and its exec) that owns the box's TCP
// socket from peer to dst (looked up with sockDiag); nil when it is gone.
func attribute(d *sockDiag, pid1 int, peer, dst netip.AddrPort) (exec, proc *ProcRef) {
	inode, err := d.inode(peer, dst)
	if err != nil || inode == 0 {
		return nil, nil
	}
	return owner(pid1, uint64(inode))
}

// attributeDNS finds the process (and its exec) that sent a DNS query
// from client over transport ("udp" or "tcp"), while it waits for the
// answer; nil when it cannot be told (the socket is gone, or the query
// was sent to another address than the box's resolver). The query was
// sent to the resolver of the box's resolv.conf (Gateway) and redirected
// to the proxy, or to the proxy's own address.
func attributeDNS(d *sockDiag, pid1 int, transport string, client netip.AddrPort) (exec, proc *ProcRef) {
	if d == nil || !client.IsValid() {
		return nil, nil
	}
	for _, server := range []netip.AddrPort{netip.AddrPortFrom(Gateway, 53), netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), DNSPort)} {
		var inode uint32
		var err error
		switch transport {
		case "udp":
			inode, err = d.inodeUDP(client, server)
		case "tcp":
			inode, err = d.inode(client, server)
		default:
			return nil, nil
		}
		if err == nil && inode != 0 {
			return owner(pid1, uint64(inode))
		}
	}
	return nil, nil
}

// AgentPath is where the agent binary is mounted in every box (the OCI
// runtime's oci.AgentPath, which a test keeps equal).
const AgentPath = "/.corral/corral"

// owner finds the process holding the socket inode among the descendants
// of the box's PID 1, and the exec it descends from. PID 1 is the agent, or
// corral-init, whose child the agent is: the execs are then the agent's
// children. The agent is told by its executable (the file mounted at
// AgentPath in the box, which the box cannot replace), not by anything the
// box wrote. Orphans that PID 1 adopted count as execs of their own.
func owner(pid1 int, inode uint64) (exec, proc *ProcRef) {
	needle := fmt.Sprintf("socket:[%d]", inode)
	// Breadth-first over PID 1's descendants; top is the exec each
	// descends from.
	type item struct{ pid, top int }
	queue := []item{}
	agentBin, agentErr := os.Stat(fmt.Sprintf("/proc/%d/root%s", pid1, AgentPath))
	for _, c := range children(pid1) {
		if exe, err := os.Stat(fmt.Sprintf("/proc/%d/exe", c)); agentErr == nil && err == nil && os.SameFile(exe, agentBin) {
			for _, e := range children(c) {
				queue = append(queue, item{e, e})
			}
			continue
		}
		queue = append(queue, item{c, c})
	}
	for seen := 0; len(queue) > 0 && seen < 100000; seen++ {
		it := queue[0]
		queue = queue[1:]
		if holds(it.pid, needle) {
			return procRef(it.top), procRef(it.pid)
		}
		for _, c := range children(it.pid) {
			queue = append(queue, item{c, it.top})
		}
	}
	return nil, nil
}

func children(pid int) []int {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	var out []int
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

func holds(pid int, needle string) bool {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range ents {
		if l, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && l == needle {
			return true
		}
	}
	return false
}

// procRef describes host pid by its pid in the box and its command line.
func procRef(hostPid int) *ProcRef {
	ref := &ProcRef{Pid: hostPid}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", hostPid)); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, "NSpid:"); ok {
				if f := strings.Fields(rest); len(f) > 0 {
					if n, err := strconv.Atoi(f[len(f)-1]); err == nil {
						ref.Pid = n
					}
				}
			}
		}
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", hostPid)); err == nil {
		b = bytes.TrimRight(b, "\x00")
		ref.Command = printable(string(bytes.ReplaceAll(b, []byte{0}, []byte{' '})))
	}
	return ref
}

// printable keeps a box-written string safe to show: control characters
// become '?' and it is cut at maxCommand bytes.
func printable(s string) string {
	if len(s) > maxCommand {
		s = s[:maxCommand]
	}
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return '?'
		}
		return r
	}, strings.ToValidUTF8(s, "?"))
}
