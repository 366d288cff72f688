package loadgen

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Result is what was measured on one target.
type Result struct {
	Target   string `json:"target"`
	URL      string `json:"url"`
	Tool     string `json:"tool"`
	Sessions int    `json:"sessions"`
	// Calls are the calls measured: OK + ToolErrors + TransportErrors.
	Calls int `json:"calls"`
	// OK are the calls answered with a result that is not isError.
	OK int `json:"ok"`
	// ToolErrors are the calls answered with an isError result: the tool
	// (or airlock: denied, unavailable, limit) said no.
	ToolErrors int `json:"tool_errors"`
	// TransportErrors are the calls that got no result: HTTP, JSON-RPC
	// or protocol errors, and calls past the call timeout.
	TransportErrors int `json:"transport_errors"`
	// Cancelled are the calls cut short by an interruption; not in Calls.
	Cancelled int `json:"cancelled"`
	// SessionsLost are the sessions whose connection closed mid-run; they
	// made no more calls.
	SessionsLost int `json:"sessions_lost"`
	// Errors are the first few distinct error messages, with counts.
	Errors []ErrorSample `json:"errors,omitempty"`
	// Seconds is the measuring time (the rounds of this target, summed).
	Seconds float64 `json:"seconds"`
	// CallsPerSecond is answered calls (OK + ToolErrors) per second.
	CallsPerSecond float64 `json:"calls_per_second"`
	// Latency is over the answered calls.
	Latency     Latency `json:"latency_ms"`
	Interrupted bool    `json:"interrupted,omitempty"`
	// CPUPerCall is the process's CPU during this target's rounds over
	// its answered calls (Options.ProcessCPU; 0 without it).
	CPUPerCall time.Duration `json:"-"`

	samples []time.Duration // latencies of the answered calls; finish sorts them
	elapsed time.Duration
	cpu     time.Duration // process CPU during the rounds (Options.ProcessCPU)
}

// ErrorSample is one distinct error message and how often it came.
type ErrorSample struct {
	Kind    string `json:"kind"` // "transport" or "isError"
	Message string `json:"message"`
	Count   int    `json:"count"`
}

// Latency summarizes the latencies of the answered calls; in JSON, in
// milliseconds.
type Latency struct {
	P50, P95, P99, Max, Mean time.Duration
}

// latencyMS is Latency in JSON: milliseconds, to the microsecond.
type latencyMS struct {
	P50  float64 `json:"p50"`
	P95  float64 `json:"p95"`
	P99  float64 `json:"p99"`
	Max  float64 `json:"max"`
	Mean float64 `json:"mean"`
}

func (l Latency) MarshalJSON() ([]byte, error) {
	ms := func(d time.Duration) float64 { return math.Round(float64(d)/1e3) / 1e3 }
	return json.Marshal(latencyMS{ms(l.P50), ms(l.P95), ms(l.P99), ms(l.Max), ms(l.Mean)})
}

func (l *Latency) UnmarshalJSON(b []byte) error {
	var m latencyMS
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	d := func(ms float64) time.Duration { return time.Duration(math.Round(ms * 1e6)) }
	*l = Latency{P50: d(m.P50), P95: d(m.P95), P99: d(m.P99), Max: d(m.Max), Mean: d(m.Mean)}
	return nil
}

// finish computes the summary from the samples.
func (r *Result) finish() {
	slices.Sort(r.samples)
	r.OK = len(r.samples) - r.ToolErrors
	r.Calls = len(r.samples) + r.TransportErrors
	r.Seconds = r.elapsed.Seconds()
	if r.Seconds > 0 {
		r.CallsPerSecond = float64(len(r.samples)) / r.Seconds
	}
	if len(r.samples) == 0 {
		return
	}
	r.CPUPerCall = r.cpu / time.Duration(len(r.samples))
	var sum time.Duration
	for _, s := range r.samples {
		sum += s
	}
	r.Latency = Latency{P50: r.Percentile(50), P95: r.Percentile(95), P99: r.Percentile(99),
		Max: r.samples[len(r.samples)-1], Mean: sum / time.Duration(len(r.samples))}
}

// Percentile is the latency that p percent of the answered calls did not
// exceed (nearest rank: exact, from every sample); 0 without samples.
func (r *Result) Percentile(p float64) time.Duration {
	n := len(r.samples)
	if n == 0 {
		return 0
	}
	i := int(math.Ceil(p/100*float64(n))) - 1
	return r.samples[min(max(i, 0), n-1)]
}

// Errs is every error of the result, transport and isError.
func (r *Result) Errs() int { return r.TransportErrors + r.ToolErrors }

// Ratio is what going through a gateway costs against calling the upstream
// directly: latencies as through / direct (47 is 47 times slower),
// throughput as through / direct (0.032 is 1/31 of the calls per second).
type Ratio struct {
	P50            float64 `json:"p50"`
	P99            float64 `json:"p99"`
	CallsPerSecond float64 `json:"calls_per_second"`
}

// Compare is the ratio of through to direct; a ratio whose direct figure
// is 0 is 0.
func Compare(direct, through *Result) Ratio {
	div := func(a, b float64) float64 {
		if b == 0 {
			return 0
		}
		return a / b
	}
	return Ratio{
		P50:            div(float64(through.Latency.P50), float64(direct.Latency.P50)),
		P99:            div(float64(through.Latency.P99), float64(direct.Latency.P99)),
		CallsPerSecond: div(through.CallsPerSecond, direct.CallsPerSecond),
	}
}

// WriteTable writes one line per result, then the first error messages of
// each.
func WriteTable(w io.Writer, rs []*Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "target\tsessions\tcalls\tcalls/s\tp50\tp95\tp99\tmax\ttransport errors\tisError\t")
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t\n", r.Target, r.Sessions, r.Calls, rate(r.CallsPerSecond),
			ms(r.Latency.P50), ms(r.Latency.P95), ms(r.Latency.P99), ms(r.Latency.Max), r.TransportErrors, r.ToolErrors)
	}
	_ = tw.Flush()
	for _, r := range rs {
		for _, e := range r.Errors {
			fmt.Fprintf(w, "%s: %d× %s: %s\n", r.Target, e.Count, e.Kind, oneLine(e.Message))
		}
		if more := r.Errs() - sumCounts(r.Errors); more > 0 {
			fmt.Fprintf(w, "%s: %d more errors with other messages\n", r.Target, more)
		}
		if r.SessionsLost > 0 {
			fmt.Fprintf(w, "%s: %d of %d sessions lost their connection and stopped\n", r.Target, r.SessionsLost, r.Sessions)
		}
	}
}

// WriteRatio writes the side-by-side table of direct and through.
func WriteRatio(w io.Writer, direct, through *Result) {
	q := Compare(direct, through)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "\t%s\t%s\tratio\t\n", direct.Target, through.Target)
	fmt.Fprintf(tw, "p50\t%s\t%s\t%s\t\n", ms(direct.Latency.P50), ms(through.Latency.P50), times(q.P50))
	fmt.Fprintf(tw, "p99\t%s\t%s\t%s\t\n", ms(direct.Latency.P99), ms(through.Latency.P99), times(q.P99))
	fmt.Fprintf(tw, "calls/s\t%s\t%s\t%s\t\n", rate(direct.CallsPerSecond), rate(through.CallsPerSecond), fraction(q.CallsPerSecond))
	_ = tw.Flush()
}

func sumCounts(es []ErrorSample) int {
	n := 0
	for _, e := range es {
		n += e.Count
	}
	return n
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// ms writes d in milliseconds with three significant digits.
func ms(d time.Duration) string {
	f := float64(d) / float64(time.Millisecond)
	switch {
	case d == 0:
		return "-"
	case f < 1:
		return fmt.Sprintf("%.3f ms", f)
	case f < 10:
		return fmt.Sprintf("%.2f ms", f)
	case f < 100:
		return fmt.Sprintf("%.1f ms", f)
	default:
		return fmt.Sprintf("%.0f ms", f)
	}
}

func rate(f float64) string {
	if f >= 100 {
		return fmt.Sprintf("%.0f", f)
	}
	return fmt.Sprintf("%.1f", f)
}

// times writes a latency ratio: "47×", "9.7×".
func times(q float64) string {
	switch {
	case q == 0:
		return "-"
	case q >= 10:
		return fmt.Sprintf("%.0f×", q)
	default:
		return fmt.Sprintf("%.2g×", q)
	}
}

// fraction writes a throughput ratio: "1/31" below 1, "1.2×" above.
func fraction(q float64) string {
	switch {
	case q == 0:
		return "-"
	case q < 0.1:
		return fmt.Sprintf("1/%.0f", 1/q)
	case q < 1:
		return fmt.Sprintf("1/%.2g", 1/q)
	default:
		return fmt.Sprintf("%.2g×", q)
	}
}

// Share is airlock's own part of a call, against the bare Temporal floor
// (an Update running one local activity on an embedded server, no airlock
// code) measured in the same run: what a call through airlock takes beyond
// what any durable call takes. Latencies are differences, through − floor
// (negative when the machine's noise is larger than the difference);
// throughput is a ratio, through / floor.
type Share struct {
	// OverFloor is through − floor at p50, p95 and p99.
	OverFloor LatencyDelta `json:"over_floor_ms"`
	// OwnP50 is through − floor − direct at p50: the share without the
	// upstream's own time, which a call through airlock includes and a
	// floor call does not. Set only when direct was measured.
	OwnP50 *time.Duration `json:"-"`
	// OfFloor is through's calls per second over the floor's (0.55: airlock
	// sustains 55% of the floor's throughput).
	OfFloor float64 `json:"calls_per_second_of_floor"`
}

// LatencyDelta is a difference of latencies; in JSON, in milliseconds.
type LatencyDelta struct {
	P50, P95, P99 time.Duration
}

func (d LatencyDelta) MarshalJSON() ([]byte, error) {
	return json.Marshal(map[string]float64{"p50": msJSON(d.P50), "p95": msJSON(d.P95), "p99": msJSON(d.P99)})
}

func (d *LatencyDelta) UnmarshalJSON(b []byte) error {
	var m map[string]float64
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	*d = LatencyDelta{P50: durJSON(m["p50"]), P95: durJSON(m["p95"]), P99: durJSON(m["p99"])}
	return nil
}

// shareJSON is Share in JSON, with OwnP50 in milliseconds.
type shareJSON struct {
	OverFloor LatencyDelta `json:"over_floor_ms"`
	OwnP50    *float64     `json:"own_p50_ms,omitempty"`
	OfFloor   float64      `json:"calls_per_second_of_floor"`
}

func (s Share) MarshalJSON() ([]byte, error) {
	j := shareJSON{OverFloor: s.OverFloor, OfFloor: s.OfFloor}
	if s.OwnP50 != nil {
		v := msJSON(*s.OwnP50)
		j.OwnP50 = &v
	}
	return json.Marshal(j)
}

func (s *Share) UnmarshalJSON(b []byte) error {
	var j shareJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*s = Share{OverFloor: j.OverFloor, OfFloor: j.OfFloor}
	if j.OwnP50 != nil {
		d := durJSON(*j.OwnP50)
		s.OwnP50 = &d
	}
	return nil
}

func msJSON(d time.Duration) float64   { return math.Round(float64(d)/1e3) / 1e3 }
func durJSON(ms float64) time.Duration { return time.Duration(math.Round(ms * 1e6)) }

// ShareOf is through's share over floor; direct, when not nil, is the
// upstream called directly in the same run (for OwnP50). A throughput
// ratio whose floor figure is 0 is 0.
func ShareOf(direct, floor, through *Result) Share {
	s := Share{OverFloor: LatencyDelta{
		P50: through.Latency.P50 - floor.Latency.P50,
		P95: through.Latency.P95 - floor.Latency.P95,
		P99: through.Latency.P99 - floor.Latency.P99,
	}}
	if floor.CallsPerSecond > 0 {
		s.OfFloor = through.CallsPerSecond / floor.CallsPerSecond
	}
	if direct != nil {
		own := s.OverFloor.P50 - direct.Latency.P50
		s.OwnP50 = &own
	}
	return s
}

// WriteShare writes direct (when not nil), the floor and through side by
// side with through's share over the floor.
func WriteShare(w io.Writer, direct, floor, through *Result) {
	s := ShareOf(direct, floor, through)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	cols := []*Result{floor, through}
	if direct != nil {
		cols = append([]*Result{direct}, cols...)
	}
	head := "\t"
	for _, r := range cols {
		head += r.Target + "\t"
	}
	fmt.Fprintln(tw, head+through.Target+" over "+floor.Target+"\t")
	row := func(name string, f func(*Result) string, share string) {
		line := name + "\t"
		for _, r := range cols {
			line += f(r) + "\t"
		}
		fmt.Fprintln(tw, line+share+"\t")
	}
	lat := func(p func(Latency) time.Duration) func(*Result) string {
		return func(r *Result) string { return ms(p(r.Latency)) }
	}
	row("p50", lat(func(l Latency) time.Duration { return l.P50 }), signedMS(s.OverFloor.P50))
	row("p95", lat(func(l Latency) time.Duration { return l.P95 }), signedMS(s.OverFloor.P95))
	row("p99", lat(func(l Latency) time.Duration { return l.P99 }), signedMS(s.OverFloor.P99))
	row("calls/s", func(r *Result) string { return rate(r.CallsPerSecond) }, ofFloor(s.OfFloor))
	_ = tw.Flush()
	fmt.Fprintf(w, "%s's own share: %s per call at p50 over the floor", through.Target, signedMS(s.OverFloor.P50))
	if s.OwnP50 != nil {
		fmt.Fprintf(w, " (%s without the upstream's own %s)", signedMS(*s.OwnP50), ms(direct.Latency.P50))
	}
	fmt.Fprintf(w, "; %s of the floor's calls per second.\n", ofFloor(s.OfFloor))
	fmt.Fprintf(w, "The floor is what any durable call costs here: one Temporal Update running one local activity on an embedded server, no airlock code.\n")
}

// signedMS writes a latency difference: "+4.30 ms", "-0.512 ms".
func signedMS(d time.Duration) string {
	switch {
	case d > 0:
		return "+" + ms(d)
	case d < 0:
		return "-" + ms(-d)
	default:
		return "0 ms"
	}
}

// ofFloor writes a throughput ratio against the floor: "0.55×".
func ofFloor(q float64) string {
	if q == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f×", q)
}
