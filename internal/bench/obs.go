package bench

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"time"

	"google.golang.org/protobuf/proto"

	processpb "github.com/corral-sandbox/corral/api/gen/process"
	"github.com/corral-sandbox/corral/api/rest"
	"github.com/corral-sandbox/corral/client"
	"github.com/corral-sandbox/corral/internal/audit"
)

// The observability section: what recording the audit trail costs, next
// to the exec round trip and the create it records, and how long GET
// /metrics takes with the density section's boxes, next to GET /health on
// the same connection.
//
// The daemon cannot switch recording off while it runs, so "recording on
// vs off" is measured as the recording work itself: the data plane's
// record of one exec (parse, the events, the writer's JSON line on disk)
// and the lifecycle events of one create, timed in this process over an
// audit store in a temporary directory, in the same run as the exec round
// trip and the create they are compared with.

// SectionObs is the observability section.
const SectionObs = "obs"

// Targets of the observability section.
const (
	// RecordingTarget is the most recording may add to an exec round
	// trip or a create, as a fraction of it.
	RecordingTarget = 0.05
	// MetricsTarget is the longest GET /metrics may take with
	// MetricsTargetBoxes boxes (issue 25).
	MetricsTarget      = 10 * time.Millisecond
	MetricsTargetBoxes = 1000
)

// Obs is the observability section's figures.
type Obs struct {
	// RecordExec is what recording one exec costs (exec and exec_end
	// events, from a request and its answer stream); Exec is the exec
	// round trip median of the same run.
	RecordExec time.Duration `json:"record_exec_ns"`
	Exec       time.Duration `json:"exec_ns"`
	// CreateEvents is how many events the daemon recorded for one create
	// (and remove); RecordCreate what recording them costs; Create the
	// create median of the same run.
	CreateEvents int           `json:"create_events"`
	RecordCreate time.Duration `json:"record_create_ns"`
	Create       time.Duration `json:"create_ns"`
	// MetricsBoxes is how many boxes the daemon had when GET /metrics
	// (Metrics, median of MetricsN) and GET /health (Health) were timed.
	MetricsBoxes int           `json:"metrics_boxes,omitempty"`
	MetricsN     int           `json:"metrics_n,omitempty"`
	Metrics      time.Duration `json:"metrics_ns,omitempty"`
	Health       time.Duration `json:"health_ns,omitempty"`
	MetricsErr   string        `json:"metrics_error,omitempty"`
	Err          string        `json:"error,omitempty"`
}

// ExecRatio is what recording adds to an exec round trip, as a fraction.
func (o *Obs) ExecRatio() float64 { return ratio(o.RecordExec, o.Exec) }

// CreateRatio is what recording adds to a create, as a fraction.
func (o *Obs) CreateRatio() float64 { return ratio(o.RecordCreate, o.Create) }

func ratio(a, b time.Duration) float64 {
	if b <= 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// obsRecords is how many execs and events the recording cost is timed
// over.
const obsRecords = 2000

// obs runs the recording part of the section; the /metrics part runs
// with the density boxes (scrapeMetrics).
func (r *run) obs(ctx context.Context) {
	o := r.obsReport()
	c := r.cfg.Client
	fail := func(err error) {
		if o.Err == "" {
			o.Err = err.Error()
		}
	}
	r.progress("corral obs: the cost of recording, over %d execs", obsRecords)
	var err error
	if o.RecordExec, err = recordExecCost(obsRecords); err != nil {
		fail(err)
	}
	// The exec round trip of this run, or a short series now.
	if e := r.rep.result(NameExec); e != nil && e.Median > 0 {
		o.Exec = e.Median
	}
	creates := max(r.cfg.Lifecycles/3, 3)
	r.progress("corral obs: %d creates", creates)
	var createTimes, execTimes []time.Duration
	for i := range creates {
		t0 := time.Now()
		sb, err := c.CreateSandbox(ctx, r.createRequest())
		if err != nil {
			fail(err)
			break
		}
		createTimes = append(createTimes, time.Since(t0))
		if o.Exec == 0 {
			for range 10 {
				t0 := time.Now()
				if err := r.exec(ctx, sb.ID, "true"); err != nil {
					fail(err)
					break
				}
				execTimes = append(execTimes, time.Since(t0))
			}
		}
		r.remove(ctx, sb.ID)
		if i == 0 {
			// The events of one box's create and remove.
			n := 0
			err := c.Events(ctx, client.EventsOptions{Box: sb.ID, Types: []string{rest.AuditLifecycle}}, func(client.AuditEvent) error {
				n++
				return nil
			})
			if err != nil {
				fail(fmt.Errorf("events of a created box (is [audit] on?): %w", err))
			}
			o.CreateEvents = n
		}
	}
	o.Create, _ = medianP90(createTimes)
	if o.Exec == 0 {
		o.Exec, _ = medianP90(execTimes)
	}
	if o.CreateEvents > 0 {
		per, err := recordEventCost(obsRecords)
		if err != nil {
			fail(err)
		}
		o.RecordCreate = per * time.Duration(o.CreateEvents)
	}
}

// obsReport returns the report's Obs, made if need be.
func (r *run) obsReport() *Obs {
	if r.rep.Obs == nil {
		r.rep.Obs = &Obs{}
	}
	return r.rep.Obs
}

// scrapeMetrics times GET /metrics and GET /health over the daemon's unix
// socket while n boxes exist (the density section's hook).
func (r *run) scrapeMetrics(ctx context.Context, n int) {
	if !r.wants(SectionObs) {
		return
	}
	o := r.obsReport()
	if r.cfg.DaemonSocket == "" {
		o.MetricsErr = "needs the daemon's unix socket"
		return
	}
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", r.cfg.DaemonSocket)
	}}}
	defer hc.CloseIdleConnections()
	get := func(path string) (time.Duration, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://corral"+path, nil)
		if err != nil {
			return 0, err
		}
		t0 := time.Now()
		resp, err := hc.Do(req)
		if err != nil {
			return 0, err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		d := time.Since(t0)
		if err == nil && resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusNoContent {
			err = fmt.Errorf("GET %s: %s", path, resp.Status)
		}
		return d, err
	}
	const scrapes = 30
	r.progress("corral obs: GET /metrics and /health, %d times each, with %d boxes", scrapes, n)
	var metrics, health []time.Duration
	for range scrapes {
		m, err := get("/metrics")
		if err != nil {
			o.MetricsErr = err.Error()
			return
		}
		h, err := get("/health")
		if err != nil {
			o.MetricsErr = err.Error()
			return
		}
		metrics, health = append(metrics, m), append(health, h)
	}
	o.MetricsBoxes, o.MetricsN = n, scrapes
	o.Metrics, _ = medianP90(metrics)
	o.Health, _ = medianP90(health)
}

// wants reports whether the run includes section s.
func (r *run) wants(s string) bool {
	for _, x := range r.cfg.Sections {
		if x == s {
			return true
		}
	}
	return false
}

// recordExecCost returns what the data plane's record of one exec costs:
// its request parsed, its answer stream followed (start, some output,
// end), and the exec and exec_end events written by the store.
func recordExecCost(n int) (time.Duration, error) {
	s, cleanup, err := benchStore()
	if err != nil {
		return 0, err
	}
	defer cleanup()
	cwd := "/work"
	msg, err := proto.Marshal(&processpb.StartRequest{Process: &processpb.ProcessConfig{
		Cmd: "sh", Args: []string{"-c", "echo hi"}, Cwd: &cwd, Envs: map[string]string{"HOME": "/root"},
	}})
	if err != nil {
		return 0, err
	}
	body := envelope(msg)
	answer := func(ev *processpb.ProcessEvent) []byte {
		b, _ := proto.Marshal(&processpb.StartResponse{Event: ev})
		return b
	}
	start := answer(&processpb.ProcessEvent{Event: &processpb.ProcessEvent_Start{Start: &processpb.ProcessEvent_StartEvent{Pid: 42}}})
	data := answer(&processpb.ProcessEvent{Event: &processpb.ProcessEvent_Data{Data: &processpb.ProcessEvent_DataEvent{Output: &processpb.ProcessEvent_DataEvent_Stdout{Stdout: []byte("hi\n")}}}})
	end := answer(&processpb.ProcessEvent{Event: &processpb.ProcessEvent_End{End: &processpb.ProcessEvent_EndEvent{Exited: true, Status: "exit status 0"}}})
	t0 := time.Now()
	for range n {
		req := httptest.NewRequest(http.MethodPost, "/process.Process/Start", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/connect+proto")
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
		e := audit.NewExec(s.Add, "bench", req)
		for _, m := range [][]byte{start, data, end} {
			e.Message(0, m[:min(len(m), audit.MaxMsgPrefix)], uint32(len(m)))
		}
		e.Finish(http.StatusOK)
	}
	s.Flush()
	return time.Since(t0) / time.Duration(n), nil
}

// recordEventCost returns what recording one lifecycle event costs.
func recordEventCost(n int) (time.Duration, error) {
	s, cleanup, err := benchStore()
	if err != nil {
		return 0, err
	}
	defer cleanup()
	t0 := time.Now()
	for range n {
		s.Add(rest.AuditEvent{Sandbox: "bench", Type: rest.AuditLifecycle,
			Lifecycle: &rest.LifecycleDetail{Change: "state", From: "creating", To: "running"}})
	}
	s.Flush()
	return time.Since(t0) / time.Duration(n), nil
}

// benchStore opens an audit store in a temporary directory, with a queue
// that holds every event of a measurement (none is dropped, all are
// written).
func benchStore() (*audit.Store, func(), error) {
	dir, err := os.MkdirTemp("", "corral-bench-audit-")
	if err != nil {
		return nil, nil, err
	}
	s, err := audit.Open(audit.Config{Dir: dir, Queue: 2*obsRecords + 16, MaxBytes: 64 << 20})
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	return s, func() { s.Close(); os.RemoveAll(dir) }, nil
}

// envelope frames msg as a Connect streaming message.
func envelope(msg []byte) []byte {
	b := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(b[1:], uint32(len(msg)))
	return append(b, msg...)
}

// printObs prints the observability section and its targets.
func printObs(w io.Writer, o *Obs) {
	if o.Err != "" {
		fmt.Fprintf(w, "recording: error: %s\n", o.Err)
	}
	if o.RecordExec > 0 && o.Exec > 0 {
		fmt.Fprintf(w, "target recording <= %.0f%% of the exec round trip: %s (%s of %s: %.2f%%)\n", RecordingTarget*100,
			verdict(o.ExecRatio() <= RecordingTarget), us(o.RecordExec), ms(o.Exec), o.ExecRatio()*100)
	}
	if o.RecordCreate > 0 && o.Create > 0 {
		fmt.Fprintf(w, "target recording <= %.0f%% of a create: %s (%d events, %s of %s: %.2f%%)\n", RecordingTarget*100,
			verdict(o.CreateRatio() <= RecordingTarget), o.CreateEvents, us(o.RecordCreate), ms(o.Create), o.CreateRatio()*100)
	}
	switch {
	case o.MetricsErr != "":
		fmt.Fprintf(w, "/metrics: error: %s\n", o.MetricsErr)
	case o.MetricsN > 0 && o.MetricsBoxes >= MetricsTargetBoxes:
		fmt.Fprintf(w, "target GET /metrics <= %s with %d boxes: %s (%s median; GET /health %s: %.1fx)\n", ms(MetricsTarget), o.MetricsBoxes,
			verdict(o.Metrics <= MetricsTarget), ms(o.Metrics), ms(o.Health), ratio(o.Metrics, o.Health))
	case o.MetricsN > 0:
		fmt.Fprintf(w, "GET /metrics with %d boxes (the target is <= %s with %d): %s median; GET /health %s: %.1fx\n", o.MetricsBoxes,
			ms(MetricsTarget), MetricsTargetBoxes, ms(o.Metrics), ms(o.Health), ratio(o.Metrics, o.Health))
	}
}

// us formats d in microseconds.
func us(d time.Duration) string { return fmt.Sprintf("%.1f µs", float64(d)/float64(time.Microsecond)) }
