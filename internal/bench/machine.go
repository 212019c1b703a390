package bench

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/corral-sandbox/corral/client"
)

// Machine describes where a report was measured.
type Machine struct {
	Kernel   string `json:"kernel"`
	CPUs     int    `json:"cpus"`
	CPUModel string `json:"cpu_model,omitempty"`
	MemTotal int64  `json:"mem_total"`
	// Cgroup is the daemon's view: "v1", "v2" or "hybrid".
	Cgroup string `json:"cgroup,omitempty"`
	// Daemon is the daemon's version and its Go version.
	Daemon string `json:"daemon,omitempty"`
	// Versions are the first lines of the peers' --version.
	Versions map[string]string `json:"versions,omitempty"`
	// LoadAvg is /proc/loadavg's 1, 5 and 15 minute load when the run
	// started: other work on the host skews every figure.
	LoadAvg string `json:"loadavg,omitempty"`
}

// String is a one-line summary: "linux 6.1.0, 2 CPUs (model), 23.5 GiB RAM,
// cgroup hybrid, load 0.10 0.20 0.30 at start".
func (m Machine) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "linux %s, %d CPUs", m.Kernel, m.CPUs)
	if m.CPUModel != "" {
		fmt.Fprintf(&b, " (%s)", m.CPUModel)
	}
	fmt.Fprintf(&b, ", %.1f GiB RAM", float64(m.MemTotal)/(1<<30))
	if m.Cgroup != "" {
		fmt.Fprintf(&b, ", cgroup %s", m.Cgroup)
	}
	if m.LoadAvg != "" {
		fmt.Fprintf(&b, ", load %s at start", m.LoadAvg)
	}
	return b.String()
}

func machineInfo(ctx context.Context, c *client.Client, peers []string) Machine {
	m := Machine{CPUs: runtimeNumCPU(), Versions: map[string]string{}}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) >= 3 {
			m.LoadAvg = strings.Join(f[:3], " ")
		}
	}
	if mi, err := readMeminfo(); err == nil {
		m.MemTotal = mi["MemTotal"]
	}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	if c != nil {
		vctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if v, err := c.Version(vctx); err == nil {
			m.Cgroup = v.Cgroup
			m.Daemon = v.Version + " (" + v.GoVersion + ")"
		}
		cancel()
	}
	for _, p := range peers {
		if v := toolVersion(ctx, p); v != "" {
			m.Versions[p] = v
		}
	}
	return m
}

// toolVersion is the first line of "<name> --version", or "".
func toolVersion(ctx context.Context, name string) string {
	bin, err := exec.LookPath(name)
	if err != nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--version")
	cmd.Env = append(os.Environ(), "PODMAN_IGNORE_CGROUPSV1_WARNING=1")
	out, err := cmd.Output()
	if err != nil {
		return ""
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return line
}
