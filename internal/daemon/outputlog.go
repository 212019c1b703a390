package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/internal/audit"
	"github.com/corral-sandbox/corral/internal/httpapi"
	"github.com/corral-sandbox/corral/internal/log"
	"github.com/corral-sandbox/corral/internal/proclog"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

// outputLogBatch is how much output a copy holds before writing it.
const outputLogBatch = 256 << 10

// boxStateDir is the state directory of box id on the host: the Manager
// removes it with the box.
func (d *Daemon) boxStateDir(id string) string {
	return filepath.Join(d.cfg.Root, "sandboxes", id)
}

// followOutput copies the new output of every running box's commands to
// their log files ([output_log]), every audit.DetachedPollInterval, until
// the daemon closes.
func (d *Daemon) followOutput(ctx context.Context, m *sandbox.Manager) error {
	cfg := d.cfg.OutputLog
	if !cfg.Enabled {
		return nil
	}
	s, err := proclog.New(proclog.Config{MaxBytesPerProcess: cfg.MaxBytesPerProcess, MaxBytesPerBox: cfg.MaxBytesPerBox})
	if err != nil {
		return err
	}
	d.outputLog = s
	log.G(ctx).Info("output log files", "max_bytes_per_process", cfg.MaxBytesPerProcess, "max_bytes_per_box", cfg.MaxBytesPerBox)
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(audit.DetachedPollInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				d.copyOutput(ctx, m)
			}
		}
	}()
	d.closers.add(func() error {
		cancel()
		<-done
		return nil
	})
	return nil
}

// copyOutput copies the new output of each running box's commands.
func (d *Daemon) copyOutput(ctx context.Context, m *sandbox.Manager) {
	recs, err := m.List(ctx)
	if err != nil {
		return
	}
	known := map[string]bool{}
	for _, rec := range recs {
		dir := d.boxStateDir(rec.ID)
		known[dir] = true
		if rec.State != sandbox.StateRunning {
			continue
		}
		// Under WithAgent: the box's removal waits for the copy, so a
		// removed box gets no file.
		err := m.WithAgent(ctx, rec.ID, func(ctx context.Context, addr string) error {
			return d.copyBoxOutput(ctx, addr, dir)
		})
		if err != nil && !errors.Is(err, sandbox.ErrBusy) && !errdefs.IsNotFound(err) && ctx.Err() == nil {
			log.G(ctx).Debug("copy output to the log files", "sandbox", rec.ID, "error", err)
		}
	}
	for _, dir := range d.outputLog.Boxes() {
		if !known[dir] {
			d.outputLog.Forget(dir)
		}
	}
}

// copyBoxOutput copies the new output of the commands of the box whose
// agent is at addr to their files in dir.
func (d *Daemon) copyBoxOutput(ctx context.Context, addr, dir string) error {
	procs, err := d.agents.Processes(ctx, addr, true)
	if err != nil {
		return err
	}
	if dropped := d.outputLog.Dropped(dir); dropped == 0 {
		defer func() {
			if n := d.outputLog.Dropped(dir); n > 0 {
				log.G(ctx).Warn("output log files of a box full: its commands' further output is not kept on the host",
					"sandbox", filepath.Base(dir), "dropped_bytes", n, "max_bytes_per_box", d.cfg.OutputLog.MaxBytesPerBox)
			}
		}()
	}
	for _, p := range procs {
		pid, started := p.GetPid(), p.GetStartedAtMs()
		next := d.outputLog.Next(dir, pid, started)
		if p.GetOutputBytes()+p.GetOutputDroppedBytes() <= next {
			continue
		}
		// The box's state directory; its removal waits for WithAgent.
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("output log: %w", err)
		}
		var batch []proclog.Chunk
		var start uint64 // offset of batch
		var size int
		flush := func() error {
			err := d.outputLog.Write(dir, pid, started, start, batch)
			start += uint64(size)
			batch, size = batch[:0], 0
			return err
		}
		_, err := d.agents.Output(ctx, addr, pid, next, func(off uint64, stderr bool, data []byte) error {
			if len(batch) > 0 && off != start+uint64(size) {
				// The agent did not keep the bytes before off: the
				// file records a gap there.
				if err := flush(); err != nil {
					return err
				}
			}
			if len(batch) == 0 {
				start = off
			}
			kind := proclog.Stdout
			if stderr {
				kind = proclog.Stderr
			}
			batch = append(batch, proclog.Chunk{Kind: kind, Data: data})
			if size += len(data); size >= outputLogBatch {
				return flush()
			}
			return nil
		})
		if err != nil {
			return err
		}
		if err := flush(); err != nil {
			return err
		}
	}
	return nil
}

// outputLogReader reads the log files for the API.
type outputLogReader struct{ d *Daemon }

func (r outputLogReader) Read(id string, pid uint32, to uint64, fn func(off uint64, stderr bool, data []byte) error) (uint64, error) {
	return r.d.outputLog.Read(r.d.boxStateDir(id), pid, to, func(c proclog.Chunk) error {
		return fn(c.Offset, c.Kind == proclog.Stderr, c.Data)
	})
}

// outputLogAPI returns the log files for the API (nil when off: a nil
// reader in the interface would not be nil).
func (d *Daemon) outputLogAPI() httpapi.OutputLog {
	if d.outputLog == nil {
		return nil
	}
	return outputLogReader{d}
}
