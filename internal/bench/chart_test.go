package bench

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"
)

// sampleReport has every kind of figure, including failed ones.
func sampleReport() *Report {
	return &Report{
		Date:    time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC),
		Machine: Machine{Kernel: "6.1.0", CPUs: 2, MemTotal: 24 << 30, Cgroup: "hybrid"},
		Results: []Result{
			{Group: GroupLifecycle, Name: NameLifecycle, N: 30, Median: 40 * time.Millisecond, P90: 50 * time.Millisecond},
			{Group: GroupLifecycle, Name: NameCreateExec, N: 30, Median: 30 * time.Millisecond},
			{Group: GroupExec, Name: NameExec, N: 300, Median: 1800 * time.Microsecond},
			{Group: GroupLifecycle, Name: PeerName("crun"), N: 30, Median: 15 * time.Millisecond},
			{Group: GroupLifecycle, Name: PeerName("podman"), Err: "podman not installed (apt-get install podman)"},
			{Group: GroupLifecycle, Name: NamePoolExec, N: 30, Median: 4 * time.Millisecond},
			{Group: GroupFork, Name: ForkName(1 << 20), N: 5, Median: 20 * time.Millisecond, First: 21 * time.Millisecond},
			{Group: GroupFork, Name: ForkName(1 << 30), N: 5, Median: 22 * time.Millisecond, First: 30 * time.Millisecond},
			{Group: GroupSuspend, Name: NameSuspend, N: 5, Median: 300 * time.Millisecond},
			{Group: GroupSuspend, Name: NameResume, Err: "criu: <restore> failed & \"quoted\""},
		},
		Ratios: map[string]float64{"crun": 40.0 / 15},
		Throughput: []Throughput{
			{Name: NameThroughput, Clients: 1, Ops: 100, Elapsed: 4 * time.Second, PerSecond: 25},
			{Name: NameThroughput, Clients: 4, Ops: 100, Elapsed: 2 * time.Second, PerSecond: 50},
			{Name: PeerName("crun"), Clients: 4, Ops: 100, Elapsed: time.Second, PerSecond: 100},
			{Name: PeerName("runc"), Clients: 4, Err: "runc not installed"},
		},
		Density: []Density{
			{Name: "corral", Boxes: 1000, Running: 1000, PerBox: 3 << 20, Growth: map[string]int64{"Slab": 800 << 20}, Returned: 0.99},
			{Name: "crun", Boxes: 1000, Err: "crun not installed"},
		},
		Suspend: &SuspendSize{MemoryBytes: 5 << 20, Samples: 5},
	}
}

// svgBars parses an SVG document strictly and returns its bar rectangles'
// classes, the number of target lines and all text.
func svgBars(t *testing.T, doc []byte) (bars []string, targets int, text string) {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(doc))
	dec.Strict = true
	var sb strings.Builder
	depth, root := 0, ""
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v\n%s", err, doc)
		}
		switch el := tok.(type) {
		case xml.StartElement:
			if depth == 0 {
				root = el.Name.Local
				if el.Name.Space != "http://www.w3.org/2000/svg" {
					t.Errorf("root namespace = %q; want the SVG namespace", el.Name.Space)
				}
			}
			depth++
			attr := map[string]string{}
			for _, a := range el.Attr {
				attr[a.Name.Local] = a.Value
			}
			switch el.Name.Local {
			case "rect":
				if strings.HasPrefix(attr["class"], "bar ") {
					bars = append(bars, attr["class"])
					if w, err := strconv.ParseFloat(attr["width"], 64); err != nil || w < 0 {
						t.Errorf("bar width %q is not a non-negative number", attr["width"])
					}
				}
			case "line":
				if attr["class"] == "target" {
					targets++
				}
			}
		case xml.EndElement:
			depth--
		case xml.CharData:
			sb.Write(el)
		}
	}
	if root != "svg" || depth != 0 {
		t.Errorf("document root = %q, depth at end %d; want a closed <svg>", root, depth)
	}
	return bars, targets, sb.String()
}

func TestWriteSVG(t *testing.T) {
	rep := sampleReport()
	var buf bytes.Buffer
	if err := WriteSVG(&buf, ChartOf(rep)); err != nil {
		t.Fatal(err)
	}
	bars, targets, text := svgBars(t, buf.Bytes())
	// One per result, plus the memory back of the density series that ran.
	want := len(rep.Results) + len(rep.Throughput) + len(rep.Density) + 1
	if len(bars) != want {
		t.Errorf("SVG has %d bars; want one per result, %d", len(bars), want)
	}
	corral := 0
	for _, b := range bars {
		if b == "bar corral" {
			corral++
		}
	}
	// Corral's: 3 lifecycle/exec + pool + 2 forks + 2 suspend + 2 throughput + 1 density + 1 memory back.
	if corral != 12 {
		t.Errorf("SVG has %d Corral bars; want 12", corral)
	}
	// lifecycle (1.5x crun), exec (0.3x crun), throughput (1.0x crun's);
	// no density target: crun's idle containers failed.
	if targets != 3 {
		t.Errorf("SVG has %d target lines; want 3", targets)
	}
	for _, s := range []string{"40 ms", "25.0/s", "3.00 MiB", "podman not installed", `criu: <restore> failed & "quoted"`, "target: 1.0× crun run, 4 clients", "saved memory 5.00 MiB", "99%"} {
		if !strings.Contains(text, s) {
			t.Errorf("SVG text lacks %q", s)
		}
	}
}

func TestWriteSVGEmpty(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteSVG(&buf, ChartOf(&Report{})); err != nil {
		t.Fatal(err)
	}
	if bars, _, _ := svgBars(t, buf.Bytes()); len(bars) != 0 {
		t.Errorf("empty report drew %d bars", len(bars))
	}
}

func TestChartOfScales(t *testing.T) {
	g := ChartGroup{Target: 2, Bars: []Bar{{Value: 1}, {Value: 10, Note: "failed"}}}
	if got := chartMax(g); got != 2*1.05 {
		t.Errorf("chartMax = %v; want the target (failed bars ignored) plus 5%%", got)
	}
	if got := chartMax(ChartGroup{}); got != 1 {
		t.Errorf("chartMax of nothing = %v; want 1", got)
	}
	c := ChartOf(sampleReport())
	prefixes := []string{"Lifecycle of true", "Exec round trip", "Throughput", "Idle density", "Memory back", "Fork", "Pause, suspend and resume"}
	if len(c.Groups) != len(prefixes) {
		t.Fatalf("chart has %d groups; want %d", len(c.Groups), len(prefixes))
	}
	for i, g := range c.Groups {
		if !strings.HasPrefix(g.Title, prefixes[i]) {
			t.Errorf("chart group %d = %q; want %s...", i, g.Title, prefixes[i])
		}
	}
	if life := c.Groups[0]; life.Target != 22.5 {
		t.Errorf("lifecycle target = %v ms; want 1.5 x crun's 15 ms", life.Target)
	}
}
