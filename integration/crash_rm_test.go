//go:build integration

package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// procStart returns the start time (field 22 of /proc/<pid>/stat) of pid,
// "" when it is gone: with the pid it names one process, whatever reuses
// the number later.
func procStart(pid int) string {
	s := readFile(filepath.Join("/proc", itoa(pid), "stat"))
	if i := strings.LastIndexByte(s, ')'); i >= 0 {
		if f := strings.Fields(s[i+1:]); len(f) > 19 {
			return f[19]
		}
	}
	return ""
}

// TestDaemonKilledMidRemove SIGKILLs the daemon at several points of a
// `corral rm -f` of a box with a running background process, restarts it
// on the same root, and checks that the box is gone or still removable,
// that an rm that reported success stays done, and that nothing of the box
// (mounts, cgroups, network namespaces, processes, files) is left once it
// is removed.
func TestDaemonKilledMidRemove(t *testing.T) {
	d := startDaemon(t)
	parent := t
	exists := func(p string) bool { _, err := os.Stat(p); return err == nil }
	type killPoint struct {
		name  string
		delay time.Duration // after rm started, when when is nil
		// when reports that the removal reached the point to kill at.
		when func(id string, sleepPid int, sleepStart string) bool
	}
	points := []killPoint{
		{name: "after_0ms"},
		{name: "after_2ms", delay: 2 * time.Millisecond},
		{name: "after_5ms", delay: 5 * time.Millisecond},
		{name: "after_7ms", delay: 7 * time.Millisecond},
		{name: "after_10ms", delay: 10 * time.Millisecond},
		{name: "after_15ms", delay: 15 * time.Millisecond},
		{name: "when_process_killed", when: func(id string, pid int, start string) bool {
			return procStart(pid) != start || strings.Contains(readFile(filepath.Join("/proc", itoa(pid), "stat")), ") Z ")
		}},
		{name: "when_cgroup_removed", when: func(id string, _ int, _ string) bool {
			return !exists(filepath.Join("/sys/fs/cgroup/pids", d.cgroup, id)) && !exists(filepath.Join("/sys/fs/cgroup", d.cgroup, id))
		}},
		{name: "when_runtime_dir_removed", when: func(id string, _ int, _ string) bool {
			m, _ := filepath.Glob(filepath.Join(d.run, "*", "sandboxes", id))
			return len(m) == 0
		}},
		{name: "when_layer_removed", when: func(id string, _ int, _ string) bool {
			return !exists(filepath.Join(d.root, "overlay", "active", id))
		}},
	}
	for _, kp := range points {
		t.Run(kp.name, func(t *testing.T) {
			d.t = t
			defer func() { d.t = parent }()
			id := strings.TrimSpace(d.must("create", "--image", "busybox"))
			t.Cleanup(func() { _, _, _ = d.corral("rm", "-f", id) })
			d.must("exec", id, "--", "sh", "-c", "echo data > /f")
			d.must("exec", "--detach", id, "--", "sleep", "1000")
			type proc struct {
				pid   int
				start string
			}
			var procs []proc
			sleepPid := 0
			for _, p := range d.cgroupPids(id) {
				procs = append(procs, proc{p, procStart(p)})
				if readFile(filepath.Join("/proc", itoa(p), "cmdline")) == "sleep\x001000\x00" {
					sleepPid = p
				}
			}
			if sleepPid == 0 {
				t.Fatalf("no sleep 1000 among the processes of box %s", id)
			}
			sleepStart := procStart(sleepPid)
			if kp.when != nil && kp.when(id, sleepPid, sleepStart) {
				t.Fatalf("kill point %s reached before rm started", kp.name)
			}

			rm := exec.Command(corralBin, "--host", "unix://"+d.socket, "rm", "-f", id)
			var rmOut strings.Builder
			rm.Stdout, rm.Stderr = &rmOut, &rmOut
			if err := rm.Start(); err != nil {
				t.Fatal(err)
			}
			rmDone := make(chan error, 1)
			go func() { rmDone <- rm.Wait() }()
			if kp.when == nil {
				time.Sleep(kp.delay)
			} else {
				deadline := time.Now().Add(10 * time.Second)
			wait:
				for !kp.when(id, sleepPid, sleepStart) {
					select {
					case err := <-rmDone:
						rmDone <- err
						t.Logf("rm returned before the kill point (%v): killing after it", err)
						break wait
					default:
					}
					if time.Now().After(deadline) {
						t.Errorf("kill point %s not reached within 10s of rm", kp.name)
						break
					}
					time.Sleep(50 * time.Microsecond)
				}
			}
			d.kill()
			var rmErr error
			select {
			case rmErr = <-rmDone:
			case <-time.After(30 * time.Second):
				_ = rm.Process.Kill()
				<-rmDone
				t.Fatalf("corral rm -f did not return within 30s of the daemon's death")
			}
			d.start()

			listed := strings.Contains(d.must("ls", "-q"), id)
			if rmErr == nil && listed {
				t.Errorf("corral rm -f %s succeeded (%q) before the crash, but the box is listed after the restart", id, rmOut.String())
			}
			t.Logf("rm exit %d (%q); listed after restart: %v", exitCode(rmErr), strings.TrimSpace(rmOut.String()), listed)
			if listed {
				if _, errOut, err := d.corral("inspect", id); err != nil {
					t.Errorf("inspect of the box still listed after the restart: %v %s", err, errOut)
				}
				if out, errOut, err := d.corral("rm", "-f", id); err != nil {
					t.Fatalf("rm -f of the box left by the crash: %v\nstdout: %s\nstderr: %s", err, out, errOut)
				}
				if strings.Contains(d.must("ls", "-q"), id) {
					t.Errorf("box %s still listed after rm -f", id)
				}
			}
			if _, _, err := d.corral("inspect", id); err == nil {
				t.Errorf("inspect %s succeeds after the box was removed", id)
			}
			// Nothing of the box survives: a removal cut short is finished by
			// the restart or by the second rm.
			d.waitLeftoversGone(5 * time.Second)
			// Processes of the box are gone. The box's PID 1 is a child of
			// the host's init (the runtime detaches it), so it may stay a
			// zombie until that init reaps it: it holds no resource, and it
			// is not the daemon's to reap.
			deadline := time.Now().Add(5 * time.Second)
			for _, p := range procs {
				for {
					stat := readFile(filepath.Join("/proc", itoa(p.pid), "stat"))
					if procStart(p.pid) != p.start {
						break // gone (or the number reused)
					}
					var state string
					var ppid int
					if i := strings.LastIndexByte(stat, ')'); i >= 0 {
						_, _ = fmt.Sscanf(stat[i+1:], " %s %d", &state, &ppid)
					}
					if state == "Z" && ppid != d.cmd.Process.Pid {
						t.Logf("process %d of removed box %s is a zombie of pid %d (not the daemon)", p.pid, id, ppid)
						break
					}
					if time.Now().After(deadline) {
						t.Errorf("process %d of removed box %s still exists: stat %q", p.pid, id, stat)
						break
					}
					time.Sleep(50 * time.Millisecond)
				}
			}
			if _, err := os.Stat(filepath.Join(d.root, "overlay", "active", id)); err == nil {
				t.Errorf("writable layer of removed box %s still exists", id)
			}
			d.requireNoLeftovers()
			// The daemon still works.
			if out := d.must("run", "--image", "busybox", "--", "echo", "ok"); out != "ok\n" {
				t.Errorf("run after the crash = %q", out)
			}
		})
	}
	d.requireNoLeftovers()
}
