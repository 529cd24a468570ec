package bench

import (
	"fmt"
	"io"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"
)

// Kinds of phase.
const (
	// KindSend phases send without a store: the ceiling and send-only.
	KindSend = "send"
	// KindDeliver phases run the whole server path.
	KindDeliver = "deliver"
	// KindFloor is the database alone, doing the least SQL a delivery
	// needs.
	KindFloor = "floor"
	// KindHTTP is the HTTP mode's traffic: a serve process driven through
	// its API.
	KindHTTP = "http"
	// KindIdle is a serve process with nothing to do.
	KindIdle = "idle"
	// KindFairness is a row of the fairness run (fairness.go).
	KindFairness = "fairness"
)

// Phase is what one phase measured.
type Phase struct {
	Name     string        `json:"name"`
	Kind     string        `json:"kind"`
	Messages int           `json:"messages"`
	Wall     time.Duration `json:"wall_ns"`
	// Rate is messages per second of wall time: for a deliver phase, from
	// the first submission created (or, with preload, the pool started) to
	// the last delivery recorded delivered.
	Rate float64 `json:"rate_per_s"`
	// Latency says what P50 and P99 measure.
	Latency        string        `json:"latency"`
	LatencySamples int           `json:"latency_samples"`
	P50            time.Duration `json:"p50_ns"`
	P99            time.Duration `json:"p99_ns"`
	// RecordedP50 and RecordedP99, for deliver phases, are submission
	// created to the delivery's completed_at, over every delivery.
	RecordedP50 time.Duration `json:"recorded_p50_ns,omitempty"`
	RecordedP99 time.Duration `json:"recorded_p99_ns,omitempty"`
	// Max, for HTTP phases, is the slowest latency sample.
	Max time.Duration `json:"max_ns,omitempty"`
	// IngestP50 and IngestP99, for HTTP phases, are from just before a
	// submission's POST to its 202 answer read, over every submission:
	// what the caller of the ingest route waits for.
	IngestP50 time.Duration `json:"ingest_p50_ns,omitempty"`
	IngestP99 time.Duration `json:"ingest_p99_ns,omitempty"`
	// InsertWall is how long creating the submissions took.
	InsertWall time.Duration `json:"insert_wall_ns,omitempty"`
	// With preload, the phase's CPU (CPUPerMsg, which counts both) split
	// into creating the backlog and draining it, each per delivery and
	// summed over this process, the plugins and the database; and the
	// database's part of the drain.
	CreateCPUPerMsg  time.Duration `json:"create_cpu_per_msg_ns,omitempty"`
	DrainCPUPerMsg   time.Duration `json:"drain_cpu_per_msg_ns,omitempty"`
	DrainDBCPUPerMsg time.Duration `json:"drain_db_cpu_per_msg_ns,omitempty"`
	// Received is how many requests the receiver verified.
	Received int64 `json:"received"`
	// Statements are the SQL statements with the most execution time, on
	// PostgreSQL with pg_stat_statements loaded.
	Statements []Statement `json:"statements,omitempty"`

	// Round is which repetition of the run this is, from 1.
	Round int `json:"round"`

	// CPUSelf is this process's CPU. In the HTTP mode that is only the
	// bench (producers, receiver), counted in no per-message figure, and
	// the server's is CPUServer.
	CPUSelf   time.Duration `json:"cpu_self_ns"`
	CPUServer time.Duration `json:"cpu_server_ns,omitempty"`
	CPUPlugin time.Duration `json:"cpu_plugin_ns"`
	CPUDB     time.Duration `json:"cpu_db_ns"`
	// CPUOther is the machine's busy time less the three above: anything
	// else that ran, which the measured phase competed with.
	CPUOther   time.Duration `json:"cpu_other_ns"`
	CPUMachine time.Duration `json:"cpu_machine_ns"`
	// CPUPerMsg is (self + plugin + db) per message: what one message
	// costs the machine, which other load disturbs far less than the rate.
	CPUPerMsg time.Duration `json:"cpu_per_message_ns"`
	// CPUBound is the rate that cost allows on every core of this machine
	// with nothing else running: NumCPU / CPUPerMsg. An upper bound: it
	// assumes the work spreads perfectly over the cores.
	CPUBound float64 `json:"cpu_bound_rate_per_s"`
	// The HTTP mode's CPU per message, by process; CPUPerMsg is their sum,
	// without the bench's own.
	CPUServerPerMsg time.Duration `json:"cpu_server_per_message_ns,omitempty"`
	CPUPluginPerMsg time.Duration `json:"cpu_plugin_per_message_ns,omitempty"`
	CPUDBPerMsg     time.Duration `json:"cpu_db_per_message_ns,omitempty"`
	// IdleCorePercent, for the idle phase, is the server's and its
	// plugins' CPU as a percentage of one core over the phase;
	// IdleDBPercent the database server's.
	IdleCorePercent float64 `json:"idle_core_percent,omitempty"`
	IdleDBPercent   float64 `json:"idle_db_core_percent,omitempty"`
	// WarmEndpoints, for an idle phase with --idle-warm, is how many
	// endpoints got one delivery each, verified, before the settle: every
	// endpoint serve had. WarmWall is from the first of those POSTs to
	// the last arrival.
	WarmEndpoints int           `json:"warm_endpoints,omitempty"`
	WarmWall      time.Duration `json:"warm_wall_ns,omitempty"`
	// Slow, SlowDelay, Missing and Bound are a fairness row's: how many
	// slow endpoints had a backlog, after how long their receiver
	// answered ("never": it did not), how many healthy deliveries had not
	// arrived fairGrace after the last POST, and the bound on the healthy
	// p99 the row is held to.
	Slow      int           `json:"slow_endpoints,omitempty"`
	SlowDelay string        `json:"slow_receiver_answers_after,omitempty"`
	Missing   int           `json:"missing,omitempty"`
	Bound     time.Duration `json:"bound_ns,omitempty"`
	PeakRSS   int64         `json:"peak_rss_bytes"`
	// ServerPeakRSS is the serve process's peak resident set.
	ServerPeakRSS int64 `json:"server_peak_rss_bytes,omitempty"`
	// PeakRSSLifetime is set when the peak could not be reset per phase,
	// so PeakRSS is the process's peak so far.
	PeakRSSLifetime bool    `json:"peak_rss_lifetime,omitempty"`
	PluginPeakRSS   int64   `json:"plugin_peak_rss_bytes,omitempty"`
	AllocsPerMsg    float64 `json:"allocs_per_message"`
	BytesPerMsg     float64 `json:"alloc_bytes_per_message"`

	where string
}

func (p *Phase) setUsage(u usage, hwmReset bool) {
	p.CPUSelf, p.CPUPlugin, p.CPUDB, p.CPUMachine = u.Self, u.Plugin, u.DB, u.Machine
	p.CPUOther = max(0, u.Machine-u.Self-u.Plugin-u.DB)
	p.CPUPerMsg = (u.Self + u.Plugin + u.DB) / time.Duration(p.Messages)
	if p.CPUPerMsg > 0 {
		p.CPUBound = float64(runtime.NumCPU()) / p.CPUPerMsg.Seconds()
	}
	p.PeakRSS, p.PeakRSSLifetime, p.PluginPeakRSS = u.PeakRSS, !hwmReset, u.PluginPeakRSS
	p.AllocsPerMsg = float64(u.Mallocs) / float64(p.Messages)
	p.BytesPerMsg = float64(u.AllocBytes) / float64(p.Messages)
}

// setDrainUsage splits a preload phase's CPU, set by setUsage, at
// created, the usage when the backlog was complete.
func (p *Phase) setDrainUsage(created, all usage) {
	n := time.Duration(p.Messages)
	p.CreateCPUPerMsg = (created.Self + created.Plugin + created.DB) / n
	p.DrainCPUPerMsg = p.CPUPerMsg - p.CreateCPUPerMsg
	p.DrainDBCPUPerMsg = (all.DB - created.DB) / n
}

// setServerUsage is setUsage for the HTTP mode, where the server is
// another process and this one only drives it.
func (p *Phase) setServerUsage(u usage, hwmReset bool) {
	p.CPUSelf, p.CPUServer, p.CPUPlugin, p.CPUDB, p.CPUMachine = u.Self, u.Server, u.Plugin, u.DB, u.Machine
	p.CPUOther = max(0, u.Machine-u.Self-u.Server-u.Plugin-u.DB)
	p.PeakRSS, p.PeakRSSLifetime, p.PluginPeakRSS, p.ServerPeakRSS = u.PeakRSS, !hwmReset, u.PluginPeakRSS, u.ServerPeakRSS
	if p.Messages > 0 {
		n := time.Duration(p.Messages)
		p.CPUServerPerMsg, p.CPUPluginPerMsg, p.CPUDBPerMsg = u.Server/n, u.Plugin/n, u.DB/n
		p.CPUPerMsg = (u.Server + u.Plugin + u.DB) / n
		if p.CPUPerMsg > 0 {
			p.CPUBound = float64(runtime.NumCPU()) / p.CPUPerMsg.Seconds()
		}
	}
	if p.Kind == KindIdle && p.Wall > 0 {
		p.IdleCorePercent = 100 * float64(u.Server+u.Plugin) / float64(p.Wall)
		p.IdleDBPercent = 100 * float64(u.DB) / float64(p.Wall)
	}
}

// Report is a whole run.
type Report struct {
	// Mode is ModeHTTP for the HTTP mode, empty for the phases.
	Mode        string  `json:"mode,omitempty"`
	Machine     Machine `json:"machine"`
	Backend     string  `json:"backend"`
	Where       string  `json:"database,omitempty"`
	Submissions int     `json:"submissions"`
	Endpoints   int     `json:"endpoints_per_submission"`
	Registered  int     `json:"registered_endpoints_other_forms,omitempty"`
	Deliveries  int     `json:"deliveries"`
	// The pool's settings; left out in the HTTP mode, where serve's own
	// settings (Serve) apply.
	Concurrency int           `json:"concurrency,omitempty"`
	BatchSize   int           `json:"batch_size,omitempty"`
	Poll        time.Duration `json:"poll_interval_ns,omitempty"`
	Producers   int           `json:"producers"`
	Rate        float64       `json:"submission_rate_per_s,omitempty"`
	Preload     bool          `json:"preload"`
	Repeat      int           `json:"repeat"`
	// Serves is how many serve processes the HTTP mode ran on its one
	// database.
	Serves int `json:"serves,omitempty"`
	// Serve is the flags the HTTP mode ran serve with; its settings are
	// serve's defaults but for these.
	Serve []string `json:"serve_flags,omitempty"`
	// Idle is how long the HTTP mode's idle phase measured.
	Idle time.Duration `json:"idle_ns,omitempty"`
	// IdleWarm says the idle phase first delivered once to every endpoint
	// (Phase.WarmEndpoints of them).
	IdleWarm bool `json:"idle_warm,omitempty"`
	// Fairness lists the fairness run's rows, when it ran instead of the
	// traffic phase.
	Fairness []string  `json:"fairness_rows,omitempty"`
	Started  time.Time `json:"started"`
	Phases   []Phase   `json:"phases"`
}

// best finds the round of a phase, by name prefix, with the highest rate;
// nil when no such phase ran.
func (r *Report) best(prefix string) *Phase {
	var b *Phase
	for i := range r.Phases {
		p := &r.Phases[i]
		if strings.HasPrefix(p.Name, prefix) && (b == nil || p.Rate > b.Rate) {
			b = p
		}
	}
	return b
}

// cheapest finds the round of a phase with the lowest CPU per message.
func (r *Report) cheapest(prefix string) *Phase {
	var b *Phase
	for i := range r.Phases {
		p := &r.Phases[i]
		if strings.HasPrefix(p.Name, prefix) && p.CPUPerMsg > 0 && (b == nil || p.CPUPerMsg < b.CPUPerMsg) {
			b = p
		}
	}
	return b
}

// Ratio is one comparison the targets are stated in.
type Ratio struct {
	What string `json:"what"`
	// Rate is the ratio of the two phases' best rates.
	Rate float64 `json:"rate"`
	// CPU is the ratio of their lowest CPU costs per message, inverted so
	// that, like Rate, above 1 means the first is cheaper.
	CPU float64 `json:"cpu"`
}

// Ratios compares the phases that ran: each end-to-end rate against the
// ceiling, and the plugin against in-process, send-only and end to end.
// With repeats, each side is its best round.
func (r *Report) Ratios() []Ratio {
	var out []Ratio
	add := func(what, a, b string) {
		pa, pb := r.best(a), r.best(b)
		if pa == nil || pb == nil || pb.Rate == 0 {
			return
		}
		x := Ratio{What: what, Rate: pa.Rate / pb.Rate}
		if ca, cb := r.cheapest(a), r.cheapest(b); ca != nil && cb != nil {
			x.CPU = float64(cb.CPUPerMsg) / float64(ca.CPUPerMsg)
		}
		out = append(out, x)
	}
	add("end to end, plugin / ceiling", "end to end: plugin", "ceiling")
	add("database floor / ceiling", "database floor", "ceiling")
	add("end to end, plugin / database floor", "end to end: plugin", "database floor")
	add("end to end, in-process / ceiling", "end to end: in-process", "ceiling")
	add("send only, plugin / in-process", "send only: plugin", "send only: in-process")
	add("end to end, plugin / in-process", "end to end: plugin", "end to end: in-process")
	add("send only, in-process / ceiling", "send only: in-process", "ceiling")
	return out
}

// WriteText prints the report as a table a person reads.
func (r *Report) WriteText(w io.Writer) error {
	if r.Mode == ModeHTTP {
		return r.writeHTTPText(w)
	}
	var b strings.Builder
	m := r.Machine
	r.writeHead(&b)
	load := "created while the pool runs, as fast as they go"
	switch {
	case r.Preload:
		load = "all created before the pool starts (draining a backlog)"
	case r.Rate > 0:
		load = fmt.Sprintf("created while the pool runs, paced at %.0f/s", r.Rate)
	}
	fmt.Fprintf(&b, "load      %d submissions x %d endpoints = %d deliveries, %d producers, %s\n", r.Submissions, r.Endpoints, r.Deliveries, r.Producers, load)
	if r.Registered > 0 {
		fmt.Fprintf(&b, "          %d more endpoints registered, each for a form no submission goes to\n", r.Registered)
	}
	fmt.Fprintf(&b, "worker    concurrency %d, batch %d, poll %s\n\n", r.Concurrency, r.BatchSize, r.Poll)

	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "phase\tround\tmsgs/s\tp50\tp99\tcpu self\tplugin\tdb\tother\tcpu/msg\tcpu-bound/s\tpeak RSS\tplugin RSS\tallocs/msg\t")
	for _, p := range r.Phases {
		rss := mib(p.PeakRSS)
		if p.PeakRSSLifetime {
			rss += "*"
		}
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%s\t%s\t%s\t%s\t%s\t%s\t%.0fµs\t%.0f\t%s\t%s\t%.0f\t\n", p.Name, p.Round, p.Rate, ms(p.P50), ms(p.P99),
			secs(p.CPUSelf), secs(p.CPUPlugin), secs(p.CPUDB), secs(p.CPUOther), float64(p.CPUPerMsg)/float64(time.Microsecond), p.CPUBound,
			rss, mib(p.PluginPeakRSS), p.AllocsPerMsg)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(&b)
	for _, p := range r.Phases {
		if p.Kind == KindFloor {
			fmt.Fprintf(&b, "%s: %d deliveries' SQL in %s, nothing sent; a bound for end to end on this database\n", p.Name, p.Messages, p.Wall.Round(time.Millisecond))
			continue
		}
		fmt.Fprintf(&b, "%s: %d messages in %s; latency is %s (%d samples)", p.Name, p.Messages, p.Wall.Round(time.Millisecond), p.Latency, p.LatencySamples)
		if p.Kind == KindDeliver {
			fmt.Fprintf(&b, "; created to recorded p50 %s p99 %s; creating the submissions took %s",
				ms(p.RecordedP50), ms(p.RecordedP99), p.InsertWall.Round(time.Millisecond))
		}
		fmt.Fprintf(&b, "; %.0f bytes allocated per message\n", p.BytesPerMsg)
		if p.DrainCPUPerMsg > 0 {
			fmt.Fprintf(&b, "  cpu/msg %s = creating the backlog %s + draining it %s (database %s of that)\n",
				us(p.CPUPerMsg), us(p.CreateCPUPerMsg), us(p.DrainCPUPerMsg), us(p.DrainDBCPUPerMsg))
		}
		if len(p.Statements) > 0 {
			var calls float64
			for _, st := range p.Statements {
				calls += st.PerMessage
			}
			fmt.Fprintf(&b, "  SQL by execution time (pg_stat_statements), %.1f statements per delivery in these:\n", calls)
			st := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
			fmt.Fprintln(st, "    calls/msg\ttotal ms\tmean ms\trows/call\tquery")
			for _, x := range p.Statements {
				mean, perCall := 0.0, 0.0
				if x.Calls > 0 {
					mean, perCall = x.TotalMS/float64(x.Calls), float64(x.Rows)/float64(x.Calls)
				}
				q := x.Query
				if len(q) > 100 {
					q = q[:100] + "…"
				}
				fmt.Fprintf(st, "    %.2f\t%.0f\t%.3f\t%.1f\t%s\n", x.PerMessage, x.TotalMS, mean, perCall, q)
			}
			if err := st.Flush(); err != nil {
				return err
			}
		}
	}
	if rs := r.Ratios(); len(rs) > 0 {
		fmt.Fprintln(&b, "\nratios (best round of each)            by rate   by cpu/msg")
		for _, x := range rs {
			fmt.Fprintf(&b, "  %-36s %6.2f   %6.2f\n", x.What, x.Rate, x.CPU)
		}
	}
	fmt.Fprintln(&b, "\nCPU in core-seconds over the phase. self: this process (pool, store client, SQLite, receiver, load);")
	fmt.Fprintln(&b, "plugin: the plugin process; db: the PostgreSQL server; other: the rest of the machine, which the phase")
	fmt.Fprintln(&b, "competed with. cpu/msg is (self + plugin + db) per message; cpu-bound/s is what that cost allows on")
	fmt.Fprintf(&b, "all %d cores with nothing else running (an upper bound).\n", m.CPUs)
	_, err := io.WriteString(w, b.String())
	return err
}

// writeHead is the first lines of either report: when, where, on what.
func (r *Report) writeHead(b *strings.Builder) {
	m := r.Machine
	fmt.Fprintf(b, "hymical bench  %s\n", r.Started.Format(time.RFC3339))
	fmt.Fprintf(b, "machine   %d CPUs (%s), %.1f GiB, %s, kernel %s, %s\n", m.CPUs, m.CPUModel, float64(m.MemTotal)/(1<<30), m.OS, m.Kernel, m.Go)
	fmt.Fprintf(b, "backend   %s  %s\n", r.Backend, r.Where)
}

// writeHTTPText is WriteText for the HTTP mode.
func (r *Report) writeHTTPText(w io.Writer) error {
	var b strings.Builder
	r.writeHead(&b)
	switch {
	case r.Idle > 0 && r.IdleWarm:
		fmt.Fprintf(&b, "load      none while measured, for %s after a %s settle; warm: before the settle, one submission to the form\n", r.Idle, warmSettle)
		fmt.Fprintf(&b, "          of each of the %d endpoints (the idle one, for %s, and the %d registered), from %d producers,\n", r.Registered+1, benchForm, r.Registered, r.Producers)
		fmt.Fprintln(&b, "          and every one of those deliveries verified at the receiver")
	case r.Idle > 0:
		fmt.Fprintf(&b, "load      none: one endpoint, no submissions, measured for %s after a %s settle\n", r.Idle, serveSettle)
		if r.Registered > 0 {
			fmt.Fprintf(&b, "          %d more endpoints registered, each for a form of its own, never delivered to\n", r.Registered)
		}
	case len(r.Fairness) > 0:
		fmt.Fprintf(&b, "load      per row, a fresh serve and store: N endpoints whose receiver answers 204 after D (never: holds the request),\n")
		fmt.Fprintf(&b, "          %d submissions fanned out to them as fast as %d producers go, then %d submissions at %.0f/s to one healthy endpoint\n",
			fairBacklog, r.Producers, fairHealthy, fairRate)
	default:
		load := "as fast as they go"
		if r.Rate > 0 {
			load = fmt.Sprintf("paced at %.0f/s", r.Rate)
		}
		fmt.Fprintf(&b, "load      %d submissions x %d endpoints = %d deliveries, %d producers posting to /v1/forms/%s/submissions, %s\n",
			r.Submissions, r.Endpoints, r.Deliveries, r.Producers, benchForm, load)
	}
	if r.Serves > 1 {
		fmt.Fprintf(&b, "serve     %d processes on the one database, each on its own port; submission i posted to serve i%%%d; the first made the endpoints\n", r.Serves, r.Serves)
		fmt.Fprintf(&b, "          each with its defaults but for %s\n\n", strings.Join(r.Serve, " "))
	} else {
		fmt.Fprintf(&b, "serve     1 process, its defaults but for %s\n\n", strings.Join(r.Serve, " "))
	}

	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', tabwriter.AlignRight)
	rows := 0
	for _, p := range r.Phases {
		if p.Kind != KindHTTP {
			continue
		}
		if rows == 0 {
			fmt.Fprintln(tw, "phase\tround\tmsgs/s\tp50\tp99\tmax\tingest p50\tingest p99\tserver/msg\tplugin/msg\tdb/msg\tcpu/msg\tcpu-bound/s\tbench cpu\tother\tserver RSS\tplugin RSS\t")
		}
		rows++
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.0f\t%s\t%s\t%s\t%s\t\n", p.Name, p.Round, p.Rate, ms(p.P50), ms(p.P99), ms(p.Max),
			ms(p.IngestP50), ms(p.IngestP99),
			us(p.CPUServerPerMsg), us(p.CPUPluginPerMsg), us(p.CPUDBPerMsg), us(p.CPUPerMsg), p.CPUBound,
			secs(p.CPUSelf), secs(p.CPUOther), mib(p.ServerPeakRSS), mib(p.PluginPeakRSS))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if err := r.writeFairness(&b); err != nil {
		return err
	}
	for _, p := range r.Phases {
		switch p.Kind {
		case KindHTTP:
			fmt.Fprintf(&b, "\n%s (round %d): %d deliveries in %s; latency is %s (%d samples); posting the submissions took %s",
				p.Name, p.Round, p.Messages, p.Wall.Round(time.Millisecond), p.Latency, p.LatencySamples, p.InsertWall.Round(time.Millisecond))
		case KindIdle:
			if p.WarmEndpoints > 0 {
				fmt.Fprintf(&b, "%s (round %d): warm, having just delivered once to each of its %d endpoints (in %s)\n",
					p.Name, p.Round, p.WarmEndpoints, p.WarmWall.Round(time.Millisecond))
			}
			fmt.Fprintf(&b, "%s (round %d): over %s, server %s + plugins %s of CPU = %.2f%% of one core; database %s = %.2f%%; bench %s; peak RSS server %s, plugin %s",
				p.Name, p.Round, p.Wall.Round(time.Millisecond), secs(p.CPUServer), secs(p.CPUPlugin), p.IdleCorePercent,
				secs(p.CPUDB), p.IdleDBPercent, secs(p.CPUSelf), mib(p.ServerPeakRSS), mib(p.PluginPeakRSS))
		default:
			continue
		}
		fmt.Fprintln(&b)
	}
	if r.Serves > 1 {
		fmt.Fprintf(&b, "\nWith %d serves, server and plugin CPU are summed over the %d serve processes and their plugin\n", r.Serves, r.Serves)
		fmt.Fprintln(&b, "processes; server RSS is the largest serve's, plugin RSS the largest plugin's.")
	}
	if rows > 0 {
		fmt.Fprintln(&b, "\nCPU per delivery by process: server is the serve process (with SQLite in it), plugin its plugin")
		fmt.Fprintln(&b, "processes, db the PostgreSQL server (backends of other databases left out); cpu/msg is their sum.")
		fmt.Fprintln(&b, "bench cpu is this process (producers, receiver), counted in no per-delivery figure; other is the")
		fmt.Fprintln(&b, "rest of the machine, in core-seconds. Latency (p50, p99, max): from just before a submission's POST")
		fmt.Fprintln(&b, "to the receiver holding its verified message, for every delivery; ingest: from just before the POST")
		fmt.Fprintln(&b, "to its 202 answer read, for every submission.")
	} else if r.Idle > 0 {
		fmt.Fprintln(&b, "\nServer is the serve process (with SQLite in it), plugins its plugin processes, database the")
		fmt.Fprintln(&b, "PostgreSQL server (backends of other databases left out); /proc counts CPU in 10 ms ticks.")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeFairness is the fairness run's table, when it ran: one line per
// row and round.
func (r *Report) writeFairness(b *strings.Builder) error {
	tw := tabwriter.NewWriter(b, 0, 4, 2, ' ', tabwriter.AlignRight)
	rows := 0
	for _, p := range r.Phases {
		if p.Kind != KindFairness {
			continue
		}
		if rows == 0 {
			fmt.Fprintln(tw, "slow endpoints\tanswer after\tround\thealthy p50\tp99\tmax\tmissing\tbound\tp99 within\t")
		}
		rows++
		within := "yes"
		if p.Missing > 0 || p.P99 > p.Bound {
			within = "NO"
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\t%s\t%d\t%s\t%s\t\n", p.Slow, p.SlowDelay, p.Round, ms(p.P50), ms(p.P99), ms(p.Max), p.Missing, ms(p.Bound), within)
	}
	if rows == 0 {
		return nil
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(b, "\nhealthy: from just before each of the %d POSTs to the healthy endpoint's form to the receiver holding its\n", fairHealthy)
	fmt.Fprintf(b, "verified message; missing: not there %s after the last POST. bound: %s plus one claim interval\n", fairGrace, fairTarget)
	fmt.Fprintln(b, "(serve's worker.poll_interval); a row is within it when its p99 is and nothing is missing.")
	return nil
}

func us(d time.Duration) string { return fmt.Sprintf("%.0fµs", float64(d)/float64(time.Microsecond)) }

func ms(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
}

func secs(d time.Duration) string { return fmt.Sprintf("%.2fs", d.Seconds()) }

func mib(b int64) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0fMiB", float64(b)/(1<<20))
}
