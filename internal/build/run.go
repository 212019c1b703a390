package build

import (
	"cmp"
	"context"
	"fmt"
	"strings"

	"connectrpc.com/connect"
	"github.com/containerd/errdefs"

	pb "github.com/corral-sandbox/corral/api/gen/process"
	"github.com/corral-sandbox/corral/internal/agentclient"
	"github.com/corral-sandbox/corral/internal/cleanup"
	"github.com/corral-sandbox/corral/internal/log"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

// run runs script with /bin/sh in a build sandbox on the current layer, as
// user (default root) in workdir (default /), streams its output, and
// commits the sandbox's changes as a layer.
func (st *state) run(ctx context.Context, i int, name, script, user, workdir string) (string, error) {
	sp := st.sp
	req := sandbox.CreateRequest{
		Image: st.base.Name,
		Base: &sandbox.Image{
			Name: st.base.Name, TopLayer: st.parent, Env: st.env, Workdir: "/",
			Binds: st.base.Binds,
			// A spec that lets its sandboxes use sudo lets its steps too.
			AllowPrivilegeEscalation: sp.AllowPrivilegeEscalation,
		},
		Resources: sandbox.Resources{
			CPUs: sp.Resources.CPUs, MemoryBytes: sp.Resources.Memory,
			DiskBytes: sp.Resources.Disk, Pids: sp.Resources.Pids,
		},
		User:        "root",
		Labels:      map[string]string{"corral.build": "true"},
		Timeout:     st.b.StepTimeout + 5*60e9,
		HostNetwork: sp.Build.Network != "none",
		Ephemeral:   true,
		// Build steps run in the container tier whatever the daemon's
		// default_tier: a gvisor box cannot share the host's network (its
		// agent listens in the box's own namespace).
		Tier: sandbox.TierContainer,
	}
	rec, err := st.b.sandboxes.Create(ctx, req)
	if err != nil {
		return "", fmt.Errorf("step %d: build sandbox: %w", i, err)
	}
	committed := false
	defer func() {
		if !committed {
			cleanup.Do(ctx, func(ctx context.Context) {
				if err := st.b.sandboxes.Delete(ctx, rec.ID, true); err != nil && !errdefs.IsNotFound(err) {
					log.G(ctx).Warn("remove build sandbox", "sandbox", rec.ID, "error", err)
				}
			})
		}
	}()
	exit, reason, err := st.exec(ctx, i, rec.AgentAddr, script, cmp.Or(user, "root"), cmp.Or(workdir, "/"))
	if err != nil {
		return "", fmt.Errorf("step %d (%s): %w", i, name, err)
	}
	if exit != 0 || reason != "" {
		return "", &StepError{Step: i, Name: name, ExitCode: exit, Reason: reason}
	}
	var layer string
	committed = true
	err = st.b.sandboxes.Commit(ctx, rec.ID, func(ctx context.Context, key string) error {
		var err error
		layer, err = st.b.images.CommitLayer(ctx, key)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("step %d (%s): commit: %w", i, name, err)
	}
	return layer, nil
}

// exec runs script in the sandbox's agent and returns its exit code and,
// when it did not exit normally, why.
func (st *state) exec(ctx context.Context, i int, addr, script, user, cwd string) (int, string, error) {
	c, err := agentclient.New(addr)
	if err != nil {
		return -1, "", err
	}
	defer c.Close()
	ms := uint64(st.b.StepTimeout.Milliseconds())
	cfg := &pb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", script}, User: &user, Cwd: &cwd, TimeoutMs: &ms}
	no := false
	stream, err := c.Process.Start(ctx, connect.NewRequest(&pb.StartRequest{Process: cfg, TimeoutMs: &ms, Stdin: &no}))
	if err != nil {
		return -1, "", err
	}
	defer stream.Close()
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		switch {
		case ev.GetData() != nil:
			d := ev.GetData()
			switch o := d.GetOutput().(type) {
			case *pb.ProcessEvent_DataEvent_Stdout:
				st.emit(Event{Type: "log", Step: i, Stream: "stdout", Data: string(o.Stdout)})
			case *pb.ProcessEvent_DataEvent_Stderr:
				st.emit(Event{Type: "log", Step: i, Stream: "stderr", Data: string(o.Stderr)})
			}
		case ev.GetEnd() != nil:
			end := ev.GetEnd()
			switch {
			case end.GetOomKilled():
				return 137, "killed: out of memory", nil
			case end.GetTimedOut():
				return 124, "timed out after " + st.b.StepTimeout.String(), nil
			case !end.GetExited():
				return 128, strings.TrimSpace(end.GetStatus() + " " + end.GetError()), nil
			}
			return int(end.GetExitCode()), "", nil
		}
	}
	if err := stream.Err(); err != nil {
		return -1, "", err
	}
	return -1, "", fmt.Errorf("the command's stream ended without an exit status: %w", errdefs.ErrUnavailable)
}
