package bench

import (
	"cmp"
	"encoding/xml"
	"fmt"
	"io"
	"strings"
	"time"
)

// Chart is what WriteSVG draws: groups of horizontal bars, one scale per
// group, with an optional target line.
type Chart struct {
	Title    string
	Subtitle string
	Groups   []ChartGroup
}

// ChartGroup is one measurement group (lifecycle, throughput, ...).
type ChartGroup struct {
	Title string
	Bars  []Bar
	// Target, when positive, is drawn as a vertical line labelled
	// TargetLabel, on the same scale as the bars.
	Target      float64
	TargetLabel string
}

// Bar is one measured value.
type Bar struct {
	Label string
	Value float64
	// Text is written at the end of the bar ("43.8 ms").
	Text string
	// Corral bars are drawn in Corral's colour, peers in grey.
	Corral bool
	// Note replaces Text when the value could not be measured.
	Note string
}

// ChartOf turns a report into a chart: one bar per lifecycle/exec/fork/
// suspend result, per throughput series and per density measurement.
func ChartOf(rep *Report) Chart {
	c := Chart{Title: "Corral vs peers on this machine"}
	if !rep.Date.IsZero() {
		c.Subtitle = rep.Date.UTC().Format("2006-01-02")
	}
	if rep.Machine.CPUs > 0 {
		c.Subtitle = strings.TrimPrefix(c.Subtitle+"; "+rep.Machine.String(), "; ")
	}
	durations := func(group, title string) ChartGroup {
		g := ChartGroup{Title: title}
		for _, r := range rep.groupResults(group) {
			g.Bars = append(g.Bars, durationBar(r))
		}
		return g
	}
	life := durations(GroupLifecycle, "Lifecycle of true: create → first exec (→ remove), median ms, lower is better")
	if r := rep.result(PeerName("crun")); r != nil && r.Median > 0 {
		life.Target = 1.5 * msOf(r.Median)
		life.TargetLabel = "target: 1.5× crun run"
	}
	exec := durations(GroupExec, "Exec round trip of true in a running sandbox, median ms")
	if r := rep.result(PeerName("crun")); r != nil && r.Median > 0 {
		exec.Target = ExecVsCrun * msOf(r.Median)
		exec.TargetLabel = fmt.Sprintf("target: %.1f× crun run", ExecVsCrun)
	}

	tp := ChartGroup{Title: "Throughput: lifecycles per second with C concurrent clients, higher is better"}
	if _, p := throughputPair(rep, PeerName("crun")); p != nil {
		tp.Target = ThroughputVsCrun * p.PerSecond
		tp.TargetLabel = fmt.Sprintf("target: %.1f× crun run, %d clients", ThroughputVsCrun, p.Clients)
	}
	for _, t := range rep.Throughput {
		b := Bar{
			Label:  fmt.Sprintf("%s, %d client%s", t.Name, t.Clients, plural(t.Clients)),
			Value:  t.PerSecond,
			Text:   fmt.Sprintf("%.1f/s", t.PerSecond),
			Corral: strings.HasPrefix(t.Name, "corral"),
		}
		if t.Ops == 0 {
			b.Note = shortErr(t.Err)
		}
		tp.Bars = append(tp.Bars, b)
	}

	dens := ChartGroup{Title: "Idle density: host memory per idle box (MemAvailable), MiB, lower is better"}
	if p := rep.density("crun"); p != nil {
		dens.Target = DensityVsCrun * float64(p.PerBox) / (1 << 20)
		dens.TargetLabel = fmt.Sprintf("target: %.1f× crun", DensityVsCrun)
	}
	for _, d := range rep.Density {
		b := Bar{
			Label:  fmt.Sprintf("%s, %d idle", d.Name, cmp.Or(d.Running, d.Boxes)),
			Value:  float64(d.PerBox) / (1 << 20),
			Text:   mib(d.PerBox),
			Corral: strings.HasPrefix(d.Name, "corral"),
		}
		if d.Running == 0 {
			b.Note = shortErr(d.Err)
		}
		dens.Bars = append(dens.Bars, b)
	}

	back := ChartGroup{Title: "Memory back after the idle boxes are removed, % of what they took, higher is better"}
	for _, d := range rep.Density {
		if d.Running == 0 || d.Returned <= 0 {
			continue
		}
		back.Bars = append(back.Bars, Bar{
			Label:  fmt.Sprintf("%s, %d removed", d.Name, d.Running),
			Value:  100 * d.Returned,
			Text:   fmt.Sprintf("%.0f%%", 100*d.Returned),
			Corral: strings.HasPrefix(d.Name, "corral"),
		})
	}
	if p := rep.density("crun"); p != nil && p.Returned > 0 {
		back.Target = MemoryBackVsCrun * 100 * p.Returned
		back.TargetLabel = fmt.Sprintf("target: %.2f× crun", MemoryBackVsCrun)
	}

	fork := durations(GroupFork, "Fork of a running sandbox (one copy), median ms: flat in the data written")
	susp := durations(GroupSuspend, "Pause, suspend and resume of an idle sandbox, median ms")
	if s := rep.Suspend; s != nil && s.MemoryBytes > 0 {
		susp.Title += fmt.Sprintf("; saved memory %s", mib(s.MemoryBytes))
	}
	for _, g := range []ChartGroup{life, exec, tp, dens, back, fork, susp} {
		if len(g.Bars) > 0 {
			c.Groups = append(c.Groups, g)
		}
	}
	return c
}

func durationBar(r Result) Bar {
	b := Bar{Label: r.Name, Value: msOf(r.Median), Text: ms(r.Median), Corral: strings.HasPrefix(r.Name, "corral")}
	if r.Median == 0 {
		b.Note = shortErr(r.Err)
	}
	return b
}

func msOf(d time.Duration) float64 { return float64(d) / 1e6 }

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// shortErr is the first line of an error, at most 70 characters.
func shortErr(s string) string {
	if s == "" {
		return "no value"
	}
	s, _, _ = strings.Cut(s, "\n")
	if r := []rune(s); len(r) > 70 {
		s = string(r[:69]) + "…"
	}
	return s
}

// Layout of the SVG, in pixels.
const (
	svgWidth   = 1000
	labelWidth = 330 // bar labels, right-aligned at labelWidth-8
	barSpace   = 500 // the longest bar
	rowHeight  = 22
	barHeight  = 15
	groupGap   = 44 // title of a group and the space above it
	topSpace   = 62
)

const svgStyle = `
text { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; font-size: 12px; fill: #1a202c; }
.title { font-size: 18px; font-weight: 600; }
.subtitle { fill: #4a5568; }
.group { font-size: 13px; font-weight: 600; }
.corral { fill: #2b6cb0; }
.peer { fill: #a0aec0; }
.value { fill: #1a202c; paint-order: stroke; stroke: #ffffff; stroke-width: 3px; }
.note { fill: #c53030; font-style: italic; }
.target { stroke: #e53e3e; stroke-width: 1.5; stroke-dasharray: 5 3; }
.targetlabel { fill: #c53030; font-size: 11px; }
.axis { stroke: #cbd5e0; stroke-width: 1; }
`

type svgDoc struct {
	XMLName xml.Name `xml:"svg"`
	Xmlns   string   `xml:"xmlns,attr"`
	Width   int      `xml:"width,attr"`
	Height  int      `xml:"height,attr"`
	ViewBox string   `xml:"viewBox,attr"`
	Style   string   `xml:"style"`
	Items   []any
}

type svgGroup struct {
	XMLName xml.Name `xml:"g"`
	Class   string   `xml:"class,attr,omitempty"`
	Items   []any
}

type svgRect struct {
	XMLName xml.Name `xml:"rect"`
	Class   string   `xml:"class,attr"`
	X       float64  `xml:"x,attr"`
	Y       float64  `xml:"y,attr"`
	Width   float64  `xml:"width,attr"`
	Height  float64  `xml:"height,attr"`
	Title   string   `xml:"title,omitempty"`
}

type svgText struct {
	XMLName xml.Name `xml:"text"`
	Class   string   `xml:"class,attr,omitempty"`
	X       float64  `xml:"x,attr"`
	Y       float64  `xml:"y,attr"`
	Anchor  string   `xml:"text-anchor,attr,omitempty"`
	Text    string   `xml:",chardata"`
}

type svgLine struct {
	XMLName xml.Name `xml:"line"`
	Class   string   `xml:"class,attr"`
	X1      float64  `xml:"x1,attr"`
	Y1      float64  `xml:"y1,attr"`
	X2      float64  `xml:"x2,attr"`
	Y2      float64  `xml:"y2,attr"`
}

// WriteSVG draws c as an SVG document: per group, a title, one
// horizontal bar per value (class "bar corral" or "bar peer") with the
// value written after it, and the target as a dashed line.
func WriteSVG(w io.Writer, c Chart) error {
	doc := svgDoc{Xmlns: "http://www.w3.org/2000/svg", Width: svgWidth, Style: svgStyle}
	doc.Items = append(doc.Items,
		svgText{Class: "title", X: 16, Y: 28, Text: c.Title},
		svgText{Class: "subtitle", X: 16, Y: 48, Text: c.Subtitle},
		svgGroup{Class: "legend", Items: []any{
			svgRect{Class: "corral", X: svgWidth - 250, Y: 18, Width: 12, Height: 12},
			svgText{X: svgWidth - 233, Y: 28, Text: "Corral"},
			svgRect{Class: "peer", X: svgWidth - 180, Y: 18, Width: 12, Height: 12},
			svgText{X: svgWidth - 163, Y: 28, Text: "peers"},
			svgLine{Class: "target key", X1: svgWidth - 115, Y1: 24, X2: svgWidth - 95, Y2: 24},
			svgText{X: svgWidth - 90, Y: 28, Text: "target"},
		}},
	)
	y := float64(topSpace)
	for _, g := range c.Groups {
		y += groupGap
		gr := svgGroup{Class: "measurements"}
		gr.Items = append(gr.Items, svgText{Class: "group", X: 16, Y: y - 12, Text: g.Title})
		scale := chartMax(g)
		x0 := float64(labelWidth)
		top := y
		bottom := top + float64(len(g.Bars)-1)*rowHeight + barHeight
		if g.Target > 0 {
			// Drawn first: the bars' values are written over it.
			tx := round1(x0 + g.Target/scale*barSpace)
			gr.Items = append(gr.Items,
				svgLine{Class: "target", X1: tx, Y1: top - 6, X2: tx, Y2: bottom + 4},
				svgText{Class: "targetlabel", X: tx + 4, Y: top - 1, Text: g.TargetLabel},
			)
		}
		for _, b := range g.Bars {
			width := 0.0
			if b.Note == "" && b.Value > 0 {
				width = b.Value / scale * barSpace
			}
			class := "bar peer"
			if b.Corral {
				class = "bar corral"
			}
			gr.Items = append(gr.Items,
				svgText{X: x0 - 8, Y: y + barHeight - 3, Anchor: "end", Text: b.Label},
				svgRect{Class: class, X: x0, Y: y, Width: round1(width), Height: barHeight, Title: barTitle(b)},
			)
			if b.Note != "" {
				gr.Items = append(gr.Items, svgText{Class: "note", X: x0 + 6, Y: y + barHeight - 3, Text: b.Note})
			} else {
				gr.Items = append(gr.Items, svgText{Class: "value", X: round1(x0 + width + 6), Y: y + barHeight - 3, Text: b.Text})
			}
			y += rowHeight
		}
		gr.Items = append(gr.Items, svgLine{Class: "axis", X1: x0, Y1: top - 3, X2: x0, Y2: bottom + 3})
		doc.Items = append(doc.Items, gr)
	}
	doc.Height = int(y) + 24
	doc.ViewBox = fmt.Sprintf("0 0 %d %d", doc.Width, doc.Height)
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", " ")
	if err := enc.Encode(doc); err != nil {
		return fmt.Errorf("write svg: %w", err)
	}
	if err := enc.Close(); err != nil {
		return fmt.Errorf("write svg: %w", err)
	}
	_, err := io.WriteString(w, "\n")
	return err
}

// chartMax is the value the full bar width stands for: the largest value
// or target plus room for the value text.
func chartMax(g ChartGroup) float64 {
	m := g.Target
	for _, b := range g.Bars {
		if b.Note == "" {
			m = max(m, b.Value)
		}
	}
	if m <= 0 {
		return 1
	}
	return m * 1.05
}

func barTitle(b Bar) string {
	if b.Note != "" {
		return b.Label + ": " + b.Note
	}
	return b.Label + ": " + b.Text
}

func round1(f float64) float64 { return float64(int64(f*10+0.5)) / 10 }
