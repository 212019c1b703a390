package httpapi

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/internal/agentclient"
	"github.com/corral-sandbox/corral/internal/audit"
	"github.com/corral-sandbox/corral/internal/log"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/units"
)

// Once an agent's answer has started, a broken connection to the agent
// (the agent died: the OOM killer took it, or its sandbox was removed)
// can no longer change the status the client got; before this, the
// client's stream just ended midway ("protocol error: incomplete
// envelope"). For the Connect streaming protocol (the answers of
// process.Process Start and Connect, filesystem.Filesystem WatchDir) the
// proxy can still end the stream properly: it follows the stream's
// envelopes, and when the agent's connection breaks between two of them,
// it sends an end-of-stream envelope whose error says what happened.
// Every Connect client (the Go SDK, the CLI, E2B's SDKs) reads it as the
// call's error. A break in the middle of an envelope still ends the
// stream abruptly: what was sent of the envelope cannot be taken back.

// connectFlagEndStream marks the Connect end-of-stream envelope.
const connectFlagEndStream = 0x02

// guardStream is the proxy's ModifyResponse: it wraps the body of a
// Connect stream in a streamGuard.
func (p *agentProxy) guardStream(resp *http.Response) error {
	oom, oomErr := strconv.ParseUint(resp.Header.Get(agentclient.OOMKillsHeader), 10, 64)
	resp.Header.Del(agentclient.OOMKillsHeader)
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/connect+") || resp.StatusCode != http.StatusOK {
		return nil
	}
	ctx := resp.Request.Context()
	t, _ := ctx.Value(targetKey{}).(target)
	g := &streamGuard{body: resp.Body}
	er, _ := ctx.Value(execRecordKey{}).(*audit.Exec)
	if er != nil {
		g.msg = er.Message
	}
	resp.Body = g
	g.end = func(cause error) []byte {
		if ue := (*unresponsiveError)(nil); errors.As(cause, &ue) {
			return endStream(ue) // the daemon's bound on the agent ended it
		}
		if ctx.Err() != nil {
			return nil // the client went away
		}
		err := p.streamBroke(ctx, t.id, oom, oomErr == nil, cause)
		if er != nil && errors.As(err, new(oomKill)) {
			er.SetOOMKilled()
		}
		return endStream(err)
	}
	return nil
}

// oomKill marks an error of streamBroke saying that the OOM killer ended
// the command with its box (the gvisor tier): the exec's record then says
// oom_killed, as the agent's end event does in the container tier.
type oomKill struct{ error }

func (e oomKill) Unwrap() error { return e.error }

// streamBroke explains why the agent's stream of sandbox id broke with
// cause. oomBefore is the box's OOM kill counter when the stream started,
// if known: a grown counter in a box that still runs means the OOM killer
// took the agent.
func (p *agentProxy) streamBroke(ctx context.Context, id string, oomBefore uint64, oomKnown bool, cause error) error {
	rec, err := p.m.Get(ctx, id)
	switch {
	case errdefs.IsNotFound(err), err == nil && rec.State == sandbox.StateDeleting:
		// The teardown goes on: for the command, its sandbox is gone.
		return fmt.Errorf("sandbox %s was removed while the command ran (agent: %v): %w", id, cause, errdefs.ErrNotFound)
	case err != nil || rec.State != sandbox.StateRunning:
		return p.agentError(ctx, id, cause)
	}
	if rec.TierOf() == sandbox.TierGVisor {
		return p.gvisorDied(ctx, id, cause)
	}
	return p.agentDied(ctx, id, oomBefore, oomKnown, cause)
}

// gvisorDied explains a broken request to a gvisor box: its agent is PID 1
// of gVisor's kernel and is never restarted, so the box ended. The memory
// limit of a gvisor box bounds the whole of it (gVisor's kernel and its
// helper processes): the host's OOM killer takes gVisor's kernel, not one
// command, so any OOM kill in the box's cgroup ended it. (The pids limit
// is gVisor's own, per command; the host's, above it, ends the box only
// when gVisor's kernel cannot make a thread.)
func (p *agentProxy) gvisorDied(ctx context.Context, id string, cause error) error {
	u, uerr := p.m.Usage(ctx, id)
	if uerr == nil && u.OOMKills > 0 {
		limit := ""
		if u.MemoryLimitBytes > 0 {
			limit = " (memory limit " + units.FormatBytes(int64(u.MemoryLimitBytes)) + ")"
		}
		log.G(ctx).Warn("gvisor box killed by the OOM killer", "sandbox", id, "oom_kills", u.OOMKills)
		return oomKill{fmt.Errorf("sandbox %s: killed: out of memory%s: in the gvisor tier the OOM killer ends the whole box (gVisor's kernel), not one command; remove it: %w",
			id, limit, errdefs.ErrResourceExhausted)}
	}
	log.G(ctx).Warn("gvisor box ended", "sandbox", id, "error", cause)
	return fmt.Errorf("sandbox %s: the box's gVisor kernel ended while the request ran (%v): a gvisor box ends whole when its kernel runs out of memory or of host tasks; remove it: %w",
		id, cause, errdefs.ErrUnavailable)
}

// agentDied explains a request whose connection to the agent of running
// sandbox id broke (cause): the agent died. With the box's OOM kill
// counter from the request's start (oomKnown), a grown counter names the
// OOM killer; without it, the counter is mentioned when it is not zero.
func (p *agentProxy) agentDied(ctx context.Context, id string, oomBefore uint64, oomKnown bool, cause error) error {
	u, uerr := p.m.Usage(ctx, id)
	limit := ""
	if uerr == nil && u.MemoryLimitBytes > 0 {
		limit = " (memory limit " + units.FormatBytes(int64(u.MemoryLimitBytes)) + ")"
	}
	if uerr == nil && oomKnown && u.OOMKills > oomBefore {
		log.G(ctx).Warn("agent killed by the OOM killer", "sandbox", id, "oom_kills", u.OOMKills)
		return fmt.Errorf("sandbox %s: its agent was killed by the OOM killer%s: the command's output ends here; the next request starts a new agent: %w",
			id, limit, errdefs.ErrResourceExhausted)
	}
	hint := ""
	if uerr == nil && !oomKnown && u.OOMKills > 0 {
		hint = fmt.Sprintf("; the box's OOM killer has killed %d processes%s", u.OOMKills, limit)
	}
	log.G(ctx).Warn("agent went away", "sandbox", id, "error", cause)
	return fmt.Errorf("sandbox %s: its agent went away while the request ran (%v)%s; the next request starts a new agent: %w",
		id, cause, hint, errdefs.ErrUnavailable)
}

// endStream returns the Connect end-of-stream envelope carrying err.
func endStream(err error) []byte {
	_, code := Classify(err)
	switch code {
	case CodeUnauthorized:
		code = "unauthenticated"
	case CodeNotImplemented:
		code = "unimplemented"
	}
	type connectError struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	body, _ := json.Marshal(struct {
		Error connectError `json:"error"`
	}{connectError{Code: code, Message: err.Error()}})
	env := make([]byte, 5, 5+len(body))
	env[0] = connectFlagEndStream
	binary.BigEndian.PutUint32(env[1:], uint32(len(body)))
	return append(env, body...)
}

// streamGuard passes a Connect stream through while following its
// envelopes (a flags byte, a 4-byte big-endian length, the message). When
// the body fails between two envelopes, and before the stream's own end,
// it ends the stream with end(err) instead (nil: it fails as it is).
type streamGuard struct {
	body io.ReadCloser
	end  func(error) []byte

	// hdr holds the bytes of the current envelope's prefix read so far
	// (hdrN of them); left is what is left of its message.
	hdr  [5]byte
	hdrN int
	left uint32
	// ended is set once the agent's own end-of-stream envelope started.
	ended bool
	// tail is the end envelope being sent, once the body failed.
	tail []byte
	// msg, when set, is given each envelope's flags, the first
	// audit.MaxMsgPrefix bytes of its message and its size, once the message
	// has passed (the audit trail).
	msg  func(flags byte, pre []byte, size uint32)
	pre  []byte
	size uint32
}

func (g *streamGuard) Read(b []byte) (int, error) {
	if g.tail != nil {
		if len(g.tail) == 0 {
			return 0, io.EOF
		}
		n := copy(b, g.tail)
		g.tail = g.tail[n:]
		return n, nil
	}
	n, err := g.body.Read(b)
	g.follow(b[:n])
	if err == nil || errors.Is(err, io.EOF) || g.ended || g.hdrN != 0 || g.left != 0 {
		return n, err
	}
	if end := g.end(err); end != nil {
		if g.msg != nil && len(end) >= 5 {
			g.msg(end[0], end[5:], uint32(len(end)-5))
		}
		g.tail = end
		return n, nil
	}
	return n, err
}

// follow advances the envelope state over b.
func (g *streamGuard) follow(b []byte) {
	for len(b) > 0 {
		if g.left > 0 {
			k := min(uint32(len(b)), g.left)
			if g.msg != nil && len(g.pre) < audit.MaxMsgPrefix {
				g.pre = append(g.pre, b[:min(int(k), audit.MaxMsgPrefix-len(g.pre))]...)
			}
			g.left -= k
			b = b[k:]
			if g.left == 0 && g.msg != nil {
				g.msg(g.hdr[0], g.pre, g.size)
			}
			continue
		}
		k := copy(g.hdr[g.hdrN:], b)
		g.hdrN += k
		b = b[k:]
		if g.hdrN == len(g.hdr) {
			g.hdrN = 0
			g.left = binary.BigEndian.Uint32(g.hdr[1:])
			if g.hdr[0]&connectFlagEndStream != 0 {
				g.ended = true
			}
			if g.msg != nil {
				g.pre, g.size = g.pre[:0], g.left
				if g.left == 0 {
					g.msg(g.hdr[0], g.pre, 0)
				}
			}
		}
	}
}

func (g *streamGuard) Close() error { return g.body.Close() }
