//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corral-sandbox/corral/api/rest"
)

// boxTier is an isolation tier a test runs its cases in: the create flags
// that choose it.
type boxTier struct {
	name string
	args []string
	// wholeBox: the memory limit bounds the box as a whole, and exceeding
	// it ends the box (gVisor's kernel is one host process tree).
	wholeBox bool
}

// boxTiers are the tiers of d available on this host: the container tier
// (crun) always, the gvisor tier when runsc is installed and the daemon
// offers it. Its cases run in each, so that a guarantee documented for
// every tier is tested in every tier.
func (d *daemon) boxTiers() []boxTier {
	d.t.Helper()
	tiers := []boxTier{{"container", []string{"--tier", "container", "--runtime", "crun"}, false}}
	if _, err := exec.LookPath("runsc"); err != nil {
		d.t.Logf("the gvisor tier is not tested: runsc is not installed (scripts/deps.sh installs it)")
		return tiers
	}
	if ti := d.tierInfo("gvisor"); !ti.Available {
		d.t.Logf("the gvisor tier is not tested: %s", ti.Missing)
		return tiers
	}
	return append(tiers, boxTier{"gvisor", []string{"--tier", "gvisor"}, true})
}

// withT is d reporting to t: its helpers fail t, not the test that
// started the daemon (a subtest must not FailNow its parent).
func (d *daemon) withT(t *testing.T) *daemon {
	c := *d
	c.t = t
	return &c
}

// createIn creates a box in tier with more create flags.
func (d *daemon) createIn(tier boxTier, args ...string) string {
	d.t.Helper()
	return d.create(append(append([]string{}, tier.args...), args...)...)
}

// TestTierLimits runs the limits of docs/isolation.md in every available
// tier: memory with the OOM kill reported, pids, CPU quota, disk.
func TestTierLimits(t *testing.T) {
	d := startDaemon(t)
	for _, tier := range d.boxTiers() {
		t.Run(tier.name, func(t *testing.T) {
			d := d.withT(t)
			t.Run("memory OOM reported", func(t *testing.T) {
				d := d.withT(t)
				id := d.createIn(tier, "--image", "busybox", "--memory", "64m")
				defer d.corral("rm", "-f", id)
				// A 256 MiB buffer: the OOM killer must stop it.
				_, errOut, err := d.corral("exec", id, "--", "dd", "if=/dev/zero", "of=/dev/null", "bs=256M", "count=1")
				if tier.wholeBox {
					// gVisor's kernel is what the host's OOM killer
					// takes: the box ends, and the error says so.
					if err == nil || !strings.Contains(errOut, "killed: out of memory (memory limit 64 MiB)") || !strings.Contains(errOut, "ends the whole box") {
						t.Errorf("memory hog: err %v stderr %q; want killed: out of memory, the limit, and that the box ended", err, errOut)
					}
					if s := d.boxState(id); s != "exited" {
						t.Errorf("state after the OOM kill = %q; want exited", s)
					}
					// The box's exit reason and the command's record
					// say OOM too.
					var sb []rest.Sandbox
					if err := json.Unmarshal([]byte(d.must("inspect", id)), &sb); err != nil || len(sb) != 1 || sb[0].Exited == nil {
						t.Fatalf("inspect: %v %+v; want an exited box", err, sb)
					}
					if r := sb[0].Exited.Reason; !strings.Contains(r, "killed: out of memory (memory limit 64 MiB)") {
						t.Errorf("inspect exited.reason = %q; want killed: out of memory with the limit", r)
					}
					oom := false
					for _, ev := range auditEvents(t, d.must("events", "--box", id, "--type", "exec_end", "--json")) {
						oom = oom || (ev.Exec != nil && ev.Exec.OOM)
					}
					if !oom {
						t.Errorf("events: no exec_end with oom_killed for the command the OOM killer ended")
					}
					return
				}
				if got := exitCode(err); got != 137 {
					t.Errorf("memory hog exit code = %d; want 137 (stderr %q)", got, errOut)
				}
				if !strings.Contains(errOut, "out of memory") || !strings.Contains(errOut, "64 MiB") {
					t.Errorf("memory hog stderr = %q; want killed: out of memory with the 64 MiB limit", errOut)
				}
				var sb []struct {
					Usage struct {
						OOMKills uint64 `json:"oom_kills"`
					} `json:"usage"`
				}
				if err := json.Unmarshal([]byte(d.must("inspect", id)), &sb); err != nil || len(sb) != 1 {
					t.Fatalf("inspect: %v", err)
				}
				if sb[0].Usage.OOMKills == 0 {
					t.Errorf("inspect usage.oom_kills = 0 after an OOM kill")
				}
				if out := d.must("exec", id, "--", "echo", "alive"); out != "alive\n" {
					t.Errorf("exec after the OOM kill = %q; want the box to survive", out)
				}
			})
			t.Run("pids", func(t *testing.T) {
				d := d.withT(t)
				id := d.createIn(tier, "--image", "busybox", "--pids", "40")
				defer d.corral("rm", "-f", id)
				// In the gvisor tier the limit is gVisor's own pids
				// cgroup, with headroom on the host's for its kernel:
				// the fork fails as in the container tier.
				out, errOut, _ := d.corral("exec", "--timeout", "30s", id, "--", "sh", "-c",
					"i=0; while [ $i -lt 200 ]; do sleep 30 & i=$((i+1)); done 2>&1; echo started")
				if !strings.Contains(out+errOut, "fork") && !strings.Contains(out+errOut, "Resource temporarily unavailable") {
					t.Errorf("200 processes under --pids 40 did not hit the limit: stdout %q stderr %q", tail(out, 5), tail(errOut, 5))
				}
				var sb []struct {
					Usage struct {
						PidsLimit uint64 `json:"pids_limit"`
					} `json:"usage"`
				}
				if err := json.Unmarshal([]byte(d.must("inspect", id)), &sb); err != nil || len(sb) != 1 {
					t.Fatalf("inspect: %v", err)
				}
				if got := sb[0].Usage.PidsLimit; got != 40 {
					t.Errorf("inspect usage.pids_limit = %d; want the box's 40", got)
				}
				// The box still runs commands: the one that ended left
				// a free slot.
				d.must("exec", id, "--", "killall", "sleep")
				if s := d.boxState(id); s != "running" {
					t.Errorf("state after the fork bomb = %q; want running", s)
				}
			})
			t.Run("CPU quota", func(t *testing.T) {
				d := d.withT(t)
				id := d.createIn(tier, "--image", "busybox", "--cpus", "0.5")
				defer d.corral("rm", "-f", id)
				// The box's cgroup, v1 or v2, has a quota of half the
				// 100 ms period.
				got := ""
				for _, f := range []string{
					fmt.Sprintf("/sys/fs/cgroup/cpu/%s/%s/cpu.cfs_quota_us", d.cgroup, id),
					fmt.Sprintf("/sys/fs/cgroup/%s/%s/cpu.max", d.cgroup, id),
				} {
					if v := strings.TrimSpace(readFile(f)); v != "" {
						got = v
					}
				}
				if got != "50000" && got != "50000 100000" {
					t.Errorf("CPU quota of a --cpus 0.5 box = %q; want 50000 of 100000", got)
				}
			})
			t.Run("disk ENOSPC", func(t *testing.T) {
				d := d.withT(t)
				id := d.createIn(tier, "--image", "busybox", "--disk", "32m")
				defer d.corral("rm", "-f", id)
				_, errOut, err := d.corral("exec", id, "--", "dd", "if=/dev/zero", "of=/fill", "bs=1M", "count=256")
				if err == nil || !strings.Contains(errOut, "No space left") {
					t.Errorf("writing 256 MiB under --disk 32m: err %v stderr %q; want ENOSPC", err, errOut)
				}
				if out := d.must("exec", id, "--", "sh", "-c", "rm /fill && echo ok > /small && cat /small"); out != "ok\n" {
					t.Errorf("box unusable after freeing its disk: %q", out)
				}
			})
		})
	}
	d.requireNoLeftovers()
}

// TestTierFiles runs exec on a terminal, cp both ways, snapshot with
// create --from, and a files-only fork in every available tier.
func TestTierFiles(t *testing.T) {
	d := startDaemon(t)
	for _, tier := range d.boxTiers() {
		t.Run(tier.name, func(t *testing.T) {
			d := d.withT(t)
			id := d.createIn(tier, "--image", "busybox", "--disk", "64m")
			defer d.corral("rm", "-f", id)
			t.Run("PTY", func(t *testing.T) {
				d := d.withT(t)
				script, err := exec.LookPath("script")
				if err != nil {
					t.Skip("script (util-linux) not installed")
				}
				cmdline := fmt.Sprintf("%s --host unix://%s exec -t %s -- sh -c 'tty; stty size'", corralBin, d.socket, id)
				cmd := exec.Command(script, "-qec", cmdline, "/dev/null")
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("exec -t under a terminal: %v\n%s", err, out)
				}
				if !strings.Contains(string(out), "/dev/pts/") {
					t.Errorf("exec -t output = %q; want the command to see a /dev/pts terminal", out)
				}
			})
			t.Run("cp both ways", func(t *testing.T) {
				d := d.withT(t)
				src := t.TempDir()
				if err := os.MkdirAll(filepath.Join(src, "dir", "sub"), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(src, "dir", "sub", "a.txt"), []byte("into the box\n"), 0o640); err != nil {
					t.Fatal(err)
				}
				d.must("cp", filepath.Join(src, "dir"), id+":/work")
				if out := d.must("exec", id, "--", "stat", "-c", "%a %u %s", "/work/sub/a.txt"); out != "640 0 13\n" {
					t.Errorf("stat of the copied file in the box = %q; want 640 0 13", out)
				}
				d.must("exec", id, "--", "sh", "-c", "echo out of the box > /work/sub/b.txt")
				dst := t.TempDir()
				d.must("cp", id+":/work", filepath.Join(dst, "back"))
				for f, want := range map[string]string{"a.txt": "into the box\n", "b.txt": "out of the box\n"} {
					if got := readFile(filepath.Join(dst, "back", "sub", f)); got != want {
						t.Errorf("copied out %s = %q; want %q", f, got, want)
					}
				}
			})
			t.Run("snapshot and create --from", func(t *testing.T) {
				d := d.withT(t)
				d.must("exec", id, "--", "sh", "-c", "echo hello > /greeting && rm /bin/ls")
				snap := "snap-" + tier.name
				d.must("snapshot", id, "--name", snap)
				defer d.corral("snapshot", "rm", snap)
				d.must("exec", id, "--", "sh", "-c", "echo changed > /greeting")
				c := d.create("--from", snap)
				defer d.corral("rm", "-f", c)
				if got := d.tierOf(c); got != tier.name {
					t.Errorf("tier of a box from a %s snapshot = %q", tier.name, got)
				}
				if out := d.must("exec", c, "--", "cat", "/greeting"); out != "hello\n" {
					t.Errorf("box from the snapshot reads %q; want hello", out)
				}
				if _, _, err := d.corral("exec", c, "--", "test", "-e", "/bin/ls"); exitCode(err) != 1 {
					t.Errorf("a file deleted before the snapshot exists in a box made from it (exit %d)", exitCode(err))
				}
			})
			t.Run("fork files", func(t *testing.T) {
				d := d.withT(t)
				d.must("exec", id, "--", "sh", "-c", "echo base > /data")
				out := d.must("fork", id, "--count", "2")
				ids := strings.Fields(out)
				if len(ids) != 2 {
					t.Fatalf("fork printed %q; want 2 ids", out)
				}
				for i, f := range ids {
					defer d.corral("rm", "-f", f)
					if got := d.tierOf(f); got != tier.name {
						t.Errorf("tier of a fork of a %s box = %q", tier.name, got)
					}
					if got := d.must("exec", f, "--", "cat", "/data"); got != "base\n" {
						t.Errorf("fork %d reads %q; want base", i, got)
					}
					d.must("exec", f, "--", "sh", "-c", fmt.Sprintf("echo fork%d > /data", i))
				}
				for i, f := range ids {
					if got := d.must("exec", f, "--", "cat", "/data"); got != fmt.Sprintf("fork%d\n", i) {
						t.Errorf("fork %d reads %q after the other fork wrote", i, got)
					}
				}
				if got := d.must("exec", id, "--", "cat", "/data"); got != "base\n" {
					t.Errorf("source reads %q after its forks wrote", got)
				}
			})
		})
	}
	d.requireNoLeftovers()
}

// tierOf is box id's tier, as inspect says.
func (d *daemon) tierOf(id string) string {
	d.t.Helper()
	var sb []struct {
		Tier string `json:"tier"`
	}
	if err := json.Unmarshal([]byte(d.must("inspect", id)), &sb); err != nil || len(sb) != 1 {
		d.t.Fatalf("inspect %s: %v", id, err)
	}
	return sb[0].Tier
}

// TestTierEgress checks the egress allowlist and its log in every
// available tier: an allowed name is reached, a denied one is not (also
// not pinned to its address, also not as a bare address), and the egress
// log has both decisions.
func TestTierEgress(t *testing.T) {
	lab := startNetLab(t)
	d := netDaemon(t, lab)
	for _, tier := range d.boxTiers() {
		t.Run(tier.name, func(t *testing.T) {
			d := d.withT(t)
			lab.Reset()
			id := d.createIn(tier, "--image", "busybox", "--network", "allowlist", "--allow", "allowed.test")
			defer d.corral("rm", "-f", id)
			// HTTP by hand: busybox's wget crashes in a box.
			get := func(host, addr string) string {
				return fmt.Sprintf("printf 'GET / HTTP/1.0\\r\\nHost: %s\\r\\n\\r\\n' | nc -w 5 %s 80", host, addr)
			}
			if out, ok := d.sh(id, get("allowed.test", "allowed.test")); !ok || !strings.Contains(out, "allowed") {
				t.Errorf("http://allowed.test: ok=%v %q", ok, out)
			}
			if out, ok := d.sh(id, "nslookup allowed.test"); !ok || !strings.Contains(out, "192.0.2.10") {
				t.Errorf("nslookup allowed.test: ok=%v %q", ok, out)
			}
			for _, cmd := range []string{
				get("forbidden.test", "forbidden.test"),
				get("forbidden.test", "192.0.2.20"),
			} {
				if out, ok := d.sh(id, cmd); ok && strings.Contains(out, "forbidden") {
					t.Errorf("%s reached the forbidden server: %q", cmd, out)
				}
			}
			if n := len(lab.Requests("forbidden.test")); n != 0 {
				t.Errorf("the forbidden server got %d requests", n)
			}
			d.sh(id, "echo hi | nc -u -w 1 192.0.2.10 9999")
			if n := lab.UDPPackets(); n != 0 {
				t.Errorf("UDP to the lab got %d datagrams out of the box", n)
			}
			var allowed, denied bool
			evs := d.netLog(id)
			for _, ev := range evs {
				if ev.Host == "allowed.test" && ev.Verdict == "allow" {
					allowed = true
				}
				if ev.Host == "forbidden.test" && ev.Verdict == "deny" && ev.Reason != "" {
					denied = true
				}
			}
			if !allowed || !denied {
				t.Errorf("egress log lacks the decisions (allowed.test allowed %v, forbidden.test denied %v): %+v", allowed, denied, evs)
			}
		})
	}
}
