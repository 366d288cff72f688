package metrics

import (
	"bufio"
	"context"
	"errors"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.temporal.io/sdk/client"
)

// scrape serves reg once and returns each sample line as series -> value,
// the series written as Prometheus writes it (labels sorted by name).
func scrape(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("scrape: %d %s", rec.Code, rec.Body)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(rec.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("scrape: bad line %q", line)
		}
		out[line[:i]] = v
	}
	return out
}

func TestSDKHandler(t *testing.T) {
	h := NewSDKHandler()
	reg := prometheus.NewRegistry()
	reg.MustRegister(h)
	var mh client.MetricsHandler = h

	// What the SDK does: root tags on the client, more per worker.
	root := mh.WithTags(map[string]string{"namespace": "default", "client_name": "temporal_go"})
	root.Counter("temporal_request").Inc(1)
	root.Counter("temporal_request").Inc(2)
	w := root.WithTags(map[string]string{"worker_type": "ActivityWorker", "task_queue": "airlock"})
	w.Counter("temporal_request").Inc(1)
	// A later tag overrides an earlier one of the same key.
	root.WithTags(map[string]string{"namespace": "other"}).Counter("temporal_request").Inc(5)
	w.Gauge("temporal_worker_task_slots_available").Update(7)
	w.Gauge("temporal_worker_task_slots_available").Update(3)
	w.Timer("temporal_activity_execution_latency").Record(1500 * time.Millisecond)
	w.Timer("temporal_activity_execution_latency").Record(500 * time.Millisecond)
	// A name keeps the kind it was first used as: a second kind is dropped.
	w.Gauge("temporal_request").Update(100)
	w.Counter("temporal_request").Inc(-4) // a counter never goes down
	// Names and tag keys that Prometheus would refuse are made valid.
	mh.WithTags(map[string]string{"task-queue": "q", "__name": "x"}).Counter("temporal.odd name").Inc(1)

	got := scrape(t, reg)
	want := map[string]float64{
		`temporal_request{client_name="temporal_go",namespace="default"}`:                                                                       3,
		`temporal_request{client_name="temporal_go",namespace="default",task_queue="airlock",worker_type="ActivityWorker"}`:                     1,
		`temporal_request{client_name="temporal_go",namespace="other"}`:                                                                         5,
		`temporal_worker_task_slots_available{client_name="temporal_go",namespace="default",task_queue="airlock",worker_type="ActivityWorker"}`: 3,
		`temporal_odd_name{task_queue="q",x__name="x"}`:                                                                                         1,
	}
	lat := `{client_name="temporal_go",namespace="default",task_queue="airlock",worker_type="ActivityWorker"}`
	want["temporal_activity_execution_latency_count"+lat] = 2
	want["temporal_activity_execution_latency_sum"+lat] = 2
	for _, le := range sdkBuckets {
		n := 0.0
		if le >= 0.5 {
			n++
		}
		if le >= 1.5 {
			n++
		}
		want["temporal_activity_execution_latency_bucket"+strings.TrimSuffix(lat, "}")+`,le="`+strconv.FormatFloat(le, 'g', -1, 64)+`"}`] = n
	}
	want["temporal_activity_execution_latency_bucket"+strings.TrimSuffix(lat, "}")+`,le="+Inf"}`] = 2
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("scrape (-want +got):\n%s", diff)
	}
}

// TestSDKHandlerConcurrent: series created and updated from many
// goroutines (the SDK's pollers) count every update once.
func TestSDKHandlerConcurrent(t *testing.T) {
	h := NewSDKHandler()
	reg := prometheus.NewRegistry()
	reg.MustRegister(h)
	done := make(chan struct{})
	for i := range 8 {
		go func() {
			defer func() { done <- struct{}{} }()
			w := h.WithTags(map[string]string{"worker": strconv.Itoa(i % 2)})
			for range 1000 {
				w.Counter("temporal_poll").Inc(1)
				w.Timer("temporal_poll_latency").Record(time.Millisecond)
			}
		}()
	}
	for range 8 {
		<-done
	}
	got := scrape(t, reg)
	for _, w := range []string{"0", "1"} {
		if n := got[`temporal_poll{worker="`+w+`"}`]; n != 4000 {
			t.Errorf("worker %s: %v polls, want 4000", w, n)
		}
		if n := got[`temporal_poll_latency_count{worker="`+w+`"}`]; n != 4000 {
			t.Errorf("worker %s: %v latencies, want 4000", w, n)
		}
	}
}

func TestPending(t *testing.T) {
	calls, n, fail := 0, int64(4), false
	p := NewPending(func(context.Context) (int64, error) {
		calls++
		if fail {
			return 0, errors.New("visibility down")
		}
		return n, nil
	}, time.Minute)
	now := time.Unix(1000, 0)
	p.now = func() time.Time { return now }
	reg := prometheus.NewRegistry()
	reg.MustRegister(p)

	if got := scrape(t, reg)["airlock_approvals_pending"]; got != 4 {
		t.Errorf("pending = %v, want 4", got)
	}
	n = 2
	now = now.Add(30 * time.Second)
	if got := scrape(t, reg)["airlock_approvals_pending"]; got != 4 || calls != 1 {
		t.Errorf("within the TTL: pending = %v after %d counts, want the cached 4 after 1", got, calls)
	}
	now = now.Add(time.Minute)
	if got := scrape(t, reg)["airlock_approvals_pending"]; got != 2 || calls != 2 {
		t.Errorf("after the TTL: pending = %v after %d counts, want 2 after 2", got, calls)
	}
	fail = true
	now = now.Add(time.Minute)
	if _, ok := scrape(t, reg)["airlock_approvals_pending"]; ok {
		t.Error("a failed count is reported; want the series left out")
	}
	fail = false
	if got := scrape(t, reg)["airlock_approvals_pending"]; got != 2 || calls != 4 {
		t.Errorf("after a failure: pending = %v after %d counts, want 2 counted again at once", got, calls)
	}
}

// TestRegistryScrapes: the process registry, with the SDK handler in it,
// scrapes without error.
func TestRegistryScrapes(t *testing.T) {
	SDK.WithTags(map[string]string{"namespace": "t"}).Counter("temporal_registry_test").Inc(1)
	rec := httptest.NewRecorder()
	Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	if rec.Code != 200 {
		t.Fatalf("scrape: %d %s", rec.Code, body)
	}
	for _, want := range []string{"# TYPE airlock_rollbacks_failed_total counter", `temporal_registry_test{namespace="t"} 1`, "go_goroutines"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// TestSDKHandlerWithTagsCached: the SDK's repeated WithTags with the same
// tags get the same handler (no merging per workflow task or activity,
// issue 12), other tags another one, and series stay apart.
func TestSDKHandlerWithTagsCached(t *testing.T) {
	h := NewSDKHandler()
	reg := prometheus.NewRegistry()
	reg.MustRegister(h)
	root := h.WithTags(map[string]string{"namespace": "default"})
	a := root.WithTags(map[string]string{"activity_type": "DecideAndCall", "task_queue": "airlock"})
	if b := root.WithTags(map[string]string{"task_queue": "airlock", "activity_type": "DecideAndCall"}); a != b {
		t.Errorf("the same tags gave two handlers")
	}
	// Tag sets whose plain concatenation is the same stay apart.
	x := root.WithTags(map[string]string{"k": "1:v"})
	y := root.WithTags(map[string]string{"k": "1", ":v": ""})
	if x == y {
		t.Errorf("different tags gave one handler")
	}
	// The same tags on another parent merge over that parent's.
	other := h.WithTags(map[string]string{"namespace": "other"}).WithTags(map[string]string{"activity_type": "DecideAndCall", "task_queue": "airlock"})
	if other == a {
		t.Errorf("WithTags on two parents gave one handler")
	}
	a.Counter("temporal_activity_execution_failed").Inc(1)
	other.Counter("temporal_activity_execution_failed").Inc(2)
	x.Counter("temporal_x").Inc(1)
	y.Counter("temporal_x").Inc(3)
	got := scrape(t, reg)
	want := map[string]float64{
		`temporal_activity_execution_failed{activity_type="DecideAndCall",namespace="default",task_queue="airlock"}`: 1,
		`temporal_activity_execution_failed{activity_type="DecideAndCall",namespace="other",task_queue="airlock"}`:   2,
		`temporal_x{k="1:v",namespace="default"}`:     1,
		`temporal_x{_v="",k="1",namespace="default"}`: 3,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("scrape (-want +got):\n%s", diff)
	}

	tags := map[string]string{"activity_type": "DecideAndCall", "task_queue": "airlock"}
	if n := testing.AllocsPerRun(100, func() { root.WithTags(tags) }); n > 2 {
		t.Errorf("a cached WithTags allocates %.0f times, want at most 2 (its key)", n)
	}

	// Past the bound, handlers are still right, only no longer cached.
	h.set.nDerived.Store(maxDerived)
	c1 := root.WithTags(map[string]string{"fresh": "1"})
	c2 := root.WithTags(map[string]string{"fresh": "1"})
	if c1 == c2 {
		t.Errorf("past maxDerived a handler was cached")
	}
	c1.Counter("temporal_fresh").Inc(1)
	c2.Counter("temporal_fresh").Inc(1)
	if got := scrape(t, reg)[`temporal_fresh{fresh="1",namespace="default"}`]; got != 2 {
		t.Errorf("uncached handlers' series: %v, want 2", got)
	}
}

// BenchmarkSDKHandlerWithTags: the SDK's per-activity re-tagging, cached
// and (past maxDerived) uncached, i.e. as before the cache.
func BenchmarkSDKHandlerWithTags(b *testing.B) {
	tags := map[string]string{"workflow_type": "AgentTask", "activity_type": "DecideAndCall", "task_queue": "airlock"}
	for _, cached := range []bool{true, false} {
		b.Run(map[bool]string{true: "cached", false: "uncached"}[cached], func(b *testing.B) {
			h := NewSDKHandler()
			root := h.WithTags(map[string]string{"namespace": "default", "client_name": "temporal_go"})
			if !cached {
				h.set.nDerived.Store(maxDerived)
			}
			b.ReportAllocs()
			for b.Loop() {
				root.WithTags(tags).Counter("temporal_activity_execution_failed")
			}
		})
	}
}

// TestSDKHandlerOwnedCounter: a workflow's count of an airlock counter
// through the SDK handler (a plan step refused by a limit) lands in that
// counter's vector with its own labels only (the SDK's tags dropped), so
// the process registry still scrapes and the series is the gateway's.
func TestSDKHandlerOwnedCounter(t *testing.T) {
	wf := SDK.WithTags(map[string]string{"namespace": "default", "task_queue": "q", "workflow_type": "Plan"})
	wf.WithTags(map[string]string{"check": "rate_limit", "limit": "owned-test"}).Counter("airlock_limit_refusals_total").Inc(1)
	wf.WithTags(map[string]string{"check": "rate_limit", "limit": "owned-test"}).Counter("airlock_limit_refusals_total").Inc(1)
	rec := httptest.NewRecorder()
	Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	if rec.Code != 200 {
		t.Fatalf("scrape: %d %s", rec.Code, body)
	}
	if want := `airlock_limit_refusals_total{check="rate_limit",limit="owned-test"} 2`; !strings.Contains(body, want) {
		t.Errorf("/metrics lacks %q:\n%s", want, body)
	}
	if strings.Contains(body, `airlock_limit_refusals_total{check="rate_limit",limit="owned-test",namespace=`) {
		t.Error("the owned counter kept the SDK's tags")
	}
}
