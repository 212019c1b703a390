package bench

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Print writes the report as tables (lifecycle and exec, operations,
// throughput, density), then the ratios and the targets.
func Print(w io.Writer, rep *Report) {
	var buf bytes.Buffer
	printReport(&buf, rep)
	// tabwriter pads the last cell of each line: drop the trailing blanks.
	for l := range strings.Lines(buf.String()) {
		io.WriteString(w, strings.TrimRight(l, " \n")+"\n")
	}
}

func printReport(w io.Writer, rep *Report) {
	if !rep.Date.IsZero() {
		fmt.Fprintf(w, "corral bench, %s\n", rep.Date.UTC().Format("2006-01-02 15:04 UTC"))
	}
	if rep.Machine.CPUs > 0 {
		fmt.Fprintf(w, "machine: %s\n", rep.Machine)
		var v []string
		if rep.Machine.Daemon != "" {
			v = append(v, "corral "+rep.Machine.Daemon)
		}
		for _, k := range slices.Sorted(maps.Keys(rep.Machine.Versions)) {
			v = append(v, rep.Machine.Versions[k])
		}
		if len(v) > 0 {
			fmt.Fprintf(w, "versions: %s\n", strings.Join(v, "; "))
		}
		fmt.Fprintln(w)
	}
	main := func(g string) bool { return g != GroupFork && g != GroupSuspend && g != GroupTiers }
	if slices.ContainsFunc(rep.Results, func(r Result) bool { return main(r.group()) }) {
		printResults(w, rep, main, true)
	}
	if len(rep.Ratios) > 0 {
		fmt.Fprintln(w)
		for _, k := range slices.Sorted(maps.Keys(rep.Ratios)) {
			fmt.Fprintf(w, "corral lifecycle / %s run: %.2fx\n", k, rep.Ratios[k])
		}
	}
	if slices.ContainsFunc(rep.Results, func(r Result) bool { return r.group() == GroupFork || r.group() == GroupSuspend }) {
		fmt.Fprintln(w)
		printResults(w, rep, func(g string) bool { return g == GroupFork || g == GroupSuspend }, false)
		if s := rep.Suspend; s != nil {
			fmt.Fprintf(w, "saved memory of a suspended idle sandbox: %s (median of %d)\n", mib(s.MemoryBytes), s.Samples)
		}
	}
	if len(rep.TierRatios) > 0 {
		fmt.Fprintln(w)
		printTiers(w, rep)
	}
	if len(rep.Throughput) > 0 {
		fmt.Fprintln(w)
		printThroughput(w, rep)
	}
	if len(rep.Density) > 0 {
		fmt.Fprintln(w)
		printDensity(w, rep)
	}
	fmt.Fprintln(w)
	printTargets(w, rep)
	if rep.Obs != nil {
		printObs(w, rep.Obs)
	}
}

// printResults prints the results of the groups in says yes to.
func printResults(w io.Writer, rep *Report, in func(group string) bool, ratios bool) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if ratios {
		fmt.Fprintln(tw, "measurement\tn\tmedian\tp90\tcorral/this\t")
	} else {
		fmt.Fprintln(tw, "operation\tn\tmedian\tp90\t")
	}
	life := rep.result(NameLifecycle)
	var results []Result
	for _, g := range []string{GroupLifecycle, GroupExec, GroupFork, GroupSuspend, GroupTiers} {
		if in(g) {
			results = append(results, rep.groupResults(g)...)
		}
	}
	for _, r := range results {
		if r.Err != "" && r.Median == 0 {
			fmt.Fprintf(tw, "%s\t%d\t-\t-\t\terror: %s\n", r.Name, len(r.Samples), r.Err)
			continue
		}
		ratio := ""
		if ratios && life != nil && life.Median > 0 && r.Median > 0 && r.group() == GroupLifecycle && !strings.HasPrefix(r.Name, "corral") {
			ratio = fmt.Sprintf("%.2fx", float64(life.Median)/float64(r.Median))
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t", r.Name, max(r.N, len(r.Samples)), msOrDash(r.Median), msOrDash(r.P90), ratio)
		if r.Err != "" {
			fmt.Fprintf(tw, "(stopped: %s)", r.Err)
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
}

func printThroughput(w io.Writer, rep *Report) {
	fmt.Fprintln(w, "throughput: lifecycles per second with C concurrent clients (CPU/op: host CPU time per lifecycle; corral/this: corral create+rm's rate over this one's)")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "series\tclients\tops\tper second\tmedian op\tp90 op\tCPU/op\tcorral/this\t")
	for _, t := range rep.Throughput {
		if t.Err != "" && t.Ops == 0 {
			fmt.Fprintf(tw, "%s\t%d\t0\t-\t-\t-\t-\t\terror: %s\n", t.Name, t.Clients, t.Err)
			continue
		}
		ratio := ""
		if c := rep.series(NameThroughput, t.Clients); c != nil && c.PerSecond > 0 && t.Name != NameThroughput && t.PerSecond > 0 {
			ratio = fmt.Sprintf("%.2fx", c.PerSecond/t.PerSecond)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.1f/s\t%s\t%s\t%s\t%s\t", t.Name, t.Clients, t.Ops, t.PerSecond,
			msOrDash(t.Median), msOrDash(t.P90), msOrDash(t.CPUPerOp), ratio)
		if t.Err != "" {
			fmt.Fprintf(tw, "(stopped: %s)", t.Err)
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
}

func printDensity(w io.Writer, rep *Report) {
	fmt.Fprintln(w, "idle density: memory/box = (MemAvailable before - with the boxes idle) / running; accounted/box = (PSS + growth of KernelStack, PageTables, SUnreclaim, Percpu) / running")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "series\tboxes\trunning\tstarted in\tmemory/box\taccounted/box\tslab/box\tRSS/box\tPSS/box\tthreads/box\texec ok\tmemory back\t")
	for _, d := range rep.Density {
		if d.Err != "" && d.Running == 0 {
			fmt.Fprintf(tw, "%s\t%d\t0\t-\t-\t-\t-\t-\t-\t-\t-\t-\terror: %s\n", d.Name, d.Boxes, d.Err)
			continue
		}
		n := int64(max(d.Running, 1))
		check := "n/a"
		if d.ExecChecked > 0 {
			check = fmt.Sprintf("%d/%d", d.ExecOK, d.ExecChecked)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%.1f\t%s\t%.0f%%\t", d.Name, d.Boxes, d.Running,
			d.Start.Round(100*time.Millisecond), mib(d.PerBox), mib(d.Accounted), mib(d.Growth["Slab"]/n), mib(d.RSS/n), mib(d.PSS/n),
			float64(d.Threads)/float64(n), check, 100*d.Returned)
		if d.Err != "" {
			fmt.Fprintf(tw, "(%s)", d.Err)
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	for _, d := range rep.Density {
		if d.Running == 0 {
			continue
		}
		n := int64(d.Running)
		var parts []string
		for _, f := range MeminfoFields {
			if f == "MemAvailable" || f == "MemFree" {
				continue
			}
			if g, ok := d.Growth[f]; ok {
				parts = append(parts, fmt.Sprintf("%s %s", f, kib(g/n)))
			}
		}
		fmt.Fprintf(w, "%s, /proc/meminfo growth per box: %s\n", d.Name, strings.Join(parts, ", "))
		if len(d.Leftover) > 0 {
			fmt.Fprintf(w, "%s, after removal vs before (whole host): MemAvailable %s, SUnreclaim %s, Percpu %s, memory cgroups %+d\n",
				d.Name, signedMiB(d.Leftover["MemAvailable"]), signedMiB(d.Leftover["SUnreclaim"]), signedMiB(d.Leftover["Percpu"]), d.MemcgsLeft)
		}
		if d.PerBoxAgents > 0 {
			fmt.Fprintf(w, "%s, memory/box with each box's agent still running: %s; the agents exited when idle %s later\n",
				d.Name, mib(d.PerBoxAgents), d.AgentsExit.Round(time.Second))
		}
		if d.Processes > 0 {
			fmt.Fprintf(w, "%s, per box process: RSS %s, PSS %s (anon %s), %.1f threads",
				d.Name, kib(d.RSS/n), kib(d.PSS/n), kib(d.PSSAnon/n), float64(d.Threads)/float64(n))
			if d.DaemonRSSGrowth != 0 {
				fmt.Fprintf(w, "; daemon RSS growth %s per box", kib(d.DaemonRSSGrowth/n))
			}
			fmt.Fprintln(w)
		}
	}
}

func printTargets(w io.Writer, rep *Report) {
	for _, v := range Verdicts(rep) {
		fmt.Fprintln(w, v)
	}
	printTierTargets(w, rep)
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}

// ms is d in milliseconds with three significant digits ("61.3 ms",
// "2.77 ms", "0.9 ms", "1020 ms").
func ms(d time.Duration) string {
	v := float64(d) / 1e6
	decimals := 0
	switch {
	case v < 1:
		decimals = 3
	case v < 10:
		decimals = 2
	case v < 100:
		decimals = 1
	}
	s := strconv.FormatFloat(v, 'f', decimals, 64)
	if decimals > 0 {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s + " ms"
}

// msOrDash is ms(d), or "-" for 0.
func msOrDash(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return ms(d)
}

// mib is n bytes in MiB with two decimals ("2.31 MiB"), or GiB from 10 GiB.
func mib(n int64) string {
	if n >= 10<<30 || n <= -10<<30 {
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	}
	return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
}

// signedMiB is n bytes in MiB with a sign ("+1.5 MiB").
func signedMiB(n int64) string {
	return fmt.Sprintf("%+.1f MiB", float64(n)/(1<<20))
}

// kib is n bytes in KiB ("843 KiB").
func kib(n int64) string {
	return fmt.Sprintf("%.0f KiB", float64(n)/1024)
}
