package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// setPidsMax writes limit to pids/pids.max of the cgroup mounted at
// cgroupRoot (Config.PidsMax). In a gvisor box that cgroup is gVisor's
// own: gVisor refuses a fork or clone past it with EAGAIN, as Linux does
// in the container tier, so a command that makes too many processes fails
// and the box lives on. The host's pids limit alone would end gVisor's
// kernel, and the box with it, when it could not make a thread. A no-op
// for limit 0.
func setPidsMax(cgroupRoot string, limit int64) error {
	if limit <= 0 {
		return nil
	}
	p := filepath.Join(cgroupRoot, "pids", "pids.max")
	if err := os.WriteFile(p, []byte(strconv.FormatInt(limit, 10)), 0); err != nil {
		return fmt.Errorf("--pids-max %d: %w", limit, err)
	}
	return nil
}
