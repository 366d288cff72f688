package metrics

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.temporal.io/sdk/client"
)

// sdkBuckets are the buckets of the SDK's timers, in seconds: from RPC
// latencies (milliseconds) to workflow end-to-end latencies (hours).
var sdkBuckets = []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 1800, 3600, 6 * 3600, 24 * 3600}

// SDKHandler is a client.MetricsHandler that records the Temporal SDK's
// metrics as Prometheus series: counters as counters, gauges as gauges,
// timers as histograms in seconds, under the names the SDK gives
// (temporal_request, temporal_activity_execution_latency, …) and with its
// tags as labels. It is a prometheus.Collector: register it once and hand
// it (or a WithTags of it) to every client.Options.
//
// The SDK emits one metric name with different tag sets (a tag is added
// by WithTags along the way), which prometheus' vectors, fixed to one set
// of label names, cannot hold; so each distinct (name, tags) pair is its
// own series, created on first use.
type SDKHandler struct {
	set  *sdkSet
	tags map[string]string
	key  string // tags in canonical form

	// derived caches this handler's WithTags: the SDK calls it with the
	// same few tag sets for every workflow task and activity (issue 12:
	// ~150 of a call's allocations were merging, sorting and re-keying
	// them). Keyed by the tags as given (withTagsKey); past maxDerived
	// handlers in the set, new ones are built uncached.
	derived *sync.Map // string -> *SDKHandler
}

var _ client.MetricsHandler = (*SDKHandler)(nil)

type sdkSet struct {
	mu     sync.RWMutex
	series map[string]prometheus.Collector
	kinds  map[string]string // metric name -> kind first seen, so a name keeps one type

	// derived caches WithTags: the SDK calls it with the same few tag
	// sets for every workflow task and activity (issue 12: ~150 of a
	// call's allocations were merging, sorting and re-keying them).
	// Keyed by the parent's key and the tags as given (withTagsKey);
	// bounded by maxDerived, past which handlers are built uncached.
	derived  sync.Map // string -> *SDKHandler
	nDerived atomic.Int64
}

// maxDerived bounds the WithTags cache: tag sets are few (namespace, task
// queue, workflow and activity types), but nothing else bounds them.
const maxDerived = 10000

// NewSDKHandler returns an empty handler; register it on a registry.
func NewSDKHandler() *SDKHandler {
	return &SDKHandler{set: &sdkSet{series: map[string]prometheus.Collector{}, kinds: map[string]string{}}, tags: map[string]string{}, derived: new(sync.Map)}
}

// WithTags implements client.MetricsHandler: the returned handler shares
// the series of h, with tags merged over h's.
func (h *SDKHandler) WithTags(tags map[string]string) client.MetricsHandler {
	ck := withTagsKey(tags)
	if d, ok := h.derived.Load(ck); ok {
		return d.(*SDKHandler)
	}
	merged := maps.Clone(h.tags)
	for k, v := range tags {
		merged[labelName(k)] = strings.ToValidUTF8(v, "\uFFFD")
	}
	d := &SDKHandler{set: h.set, tags: merged, key: tagKey(merged), derived: new(sync.Map)}
	if h.set.nDerived.Load() < maxDerived {
		if prev, loaded := h.derived.LoadOrStore(ck, d); loaded {
			return prev.(*SDKHandler)
		}
		h.set.nDerived.Add(1)
	}
	return d
}

// withTagsKey identifies a WithTags argument: tags in key order, every
// string length-prefixed, so that no two tag sets share a key whatever
// bytes they hold.
func withTagsKey(tags map[string]string) string {
	var small [8]string
	keys := small[:0]
	for k := range tags {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	n := 0
	for _, k := range keys {
		n += len(k) + len(tags[k]) + 16
	}
	b := make([]byte, 0, n)
	for _, k := range keys {
		b = strconv.AppendInt(b, int64(len(k)), 10)
		b = append(b, ':')
		b = append(b, k...)
		b = strconv.AppendInt(b, int64(len(tags[k])), 10)
		b = append(b, ':')
		b = append(b, tags[k]...)
	}
	return string(b)
}

// sdkOwned are airlock's own counters that workflow code counts through
// the SDK's replay-aware handler (workflow.GetMetricsHandler), by name:
// such a count goes to the vector, with the labels it declares taken from
// the handler's tags (the SDK's own tags, namespace, task_queue and
// workflow_type, are dropped), so that one metric has one set of labels
// whichever role counted it.
var sdkOwned = map[string]struct {
	vec    *prometheus.CounterVec
	labels []string
}{
	// Plan steps refused by a limit (workflows, runStep); the gateway
	// counts the calls it answers itself.
	"airlock_limit_refusals_total": {LimitRefusals, []string{"check", "limit"}},
	// Task-state calls (workflows, stateCall), whoever called.
	"airlock_task_state_calls_total": {StateCalls, []string{"op", "result"}},
}

// Counter implements client.MetricsHandler.
func (h *SDKHandler) Counter(name string) client.MetricsCounter {
	if o, ok := sdkOwned[name]; ok {
		l := prometheus.Labels{}
		for _, n := range o.labels {
			l[n] = h.tags[n]
		}
		c, err := o.vec.GetMetricWith(l)
		if err != nil {
			return client.MetricsNopHandler.Counter(name)
		}
		return counter{c}
	}
	c, ok := h.get("counter", name, func(opts prometheus.Opts) prometheus.Collector {
		return prometheus.NewCounter(prometheus.CounterOpts(opts))
	}).(prometheus.Counter)
	if !ok {
		return client.MetricsNopHandler.Counter(name)
	}
	return counter{c}
}

// Gauge implements client.MetricsHandler.
func (h *SDKHandler) Gauge(name string) client.MetricsGauge {
	g, ok := h.get("gauge", name, func(opts prometheus.Opts) prometheus.Collector {
		return prometheus.NewGauge(prometheus.GaugeOpts(opts))
	}).(prometheus.Gauge)
	if !ok {
		return client.MetricsNopHandler.Gauge(name)
	}
	return gauge{g}
}

// Timer implements client.MetricsHandler.
func (h *SDKHandler) Timer(name string) client.MetricsTimer {
	o, ok := h.get("timer", name, func(opts prometheus.Opts) prometheus.Collector {
		return prometheus.NewHistogram(prometheus.HistogramOpts{Name: opts.Name, Help: opts.Help, ConstLabels: opts.ConstLabels, Buckets: sdkBuckets})
	}).(prometheus.Observer)
	if !ok {
		return client.MetricsNopHandler.Timer(name)
	}
	return timer{o}
}

// get returns the series of (name, h's tags), creating it with mk. A name
// first used as another kind gets no series (nil): Prometheus cannot hold
// one name with two types.
func (h *SDKHandler) get(kind, name string, mk func(prometheus.Opts) prometheus.Collector) prometheus.Collector {
	name = labelName(name)
	id := name + "\xff" + h.key
	s := h.set
	s.mu.RLock()
	c, ok := s.series[id]
	k := s.kinds[name]
	s.mu.RUnlock()
	if ok {
		if k != kind {
			return nil
		}
		return c
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.series[id]; ok {
		return c
	}
	if k, ok := s.kinds[name]; ok && k != kind {
		return nil
	}
	s.kinds[name] = kind
	c = mk(prometheus.Opts{Name: name, Help: "Temporal SDK " + kind + " " + name + ".", ConstLabels: h.tags})
	s.series[id] = c
	return c
}

// Describe implements prometheus.Collector. It describes nothing: the
// series are not known in advance, so the registry takes the handler as an
// unchecked collector.
func (h *SDKHandler) Describe(chan<- *prometheus.Desc) {}

// Collect implements prometheus.Collector.
func (h *SDKHandler) Collect(ch chan<- prometheus.Metric) {
	h.set.mu.RLock()
	defer h.set.mu.RUnlock()
	for _, c := range h.set.series {
		c.Collect(ch)
	}
}

type counter struct{ c prometheus.Counter }

// Inc adds d; the SDK never passes a negative delta, and one that did is
// dropped (a Prometheus counter only goes up).
func (c counter) Inc(d int64) {
	if d > 0 {
		c.c.Add(float64(d))
	}
}

type gauge struct{ g prometheus.Gauge }

func (g gauge) Update(v float64) { g.g.Set(v) }

type timer struct{ o prometheus.Observer }

func (t timer) Record(d time.Duration) { t.o.Observe(d.Seconds()) }

// tagKey is a canonical form of a tag set.
func tagKey(tags map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(tags)) {
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(tags[k])
		b.WriteByte(0)
	}
	return b.String()
}

// labelName makes a name valid for Prometheus (letters, digits and _; not
// starting with a digit). The SDK's names and tag keys already are.
func labelName(s string) string {
	ok := s != ""
	for i, r := range s {
		if !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || i > 0 && r >= '0' && r <= '9') {
			ok = false
			break
		}
	}
	if strings.HasPrefix(s, "__") { // reserved for Prometheus' own use
		ok, s = false, "x"+s
	}
	if ok {
		return s
	}
	b := []byte(s)
	for i, c := range b {
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9') {
			b[i] = '_'
		}
	}
	if len(b) == 0 {
		return "_"
	}
	return string(b)
}
