package metrics

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

var pendingDesc = prometheus.NewDesc("airlock_approvals_pending",
	"Running tasks waiting for at least one approval, as Temporal's visibility counts them (AirlockApproval = pending); the same cluster-wide value on every process that reports it.",
	nil, nil)

// Pending reports airlock_approvals_pending from a count that the caller
// asks Temporal for (tasks whose AirlockApproval attribute is "pending"),
// at scrape time. The count is cached for a while so that many scrapers do
// not each query visibility; when it fails, the metric is left out of the
// scrape rather than reported as 0.
type Pending struct {
	count   func(context.Context) (int64, error)
	ttl     time.Duration
	timeout time.Duration
	now     func() time.Time

	mu   sync.Mutex
	at   time.Time
	last int64
	ok   bool
}

// NewPending returns the collector; register it on Registry while the
// process has a Temporal client. ttl <= 0 means 10s.
func NewPending(count func(context.Context) (int64, error), ttl time.Duration) *Pending {
	if ttl <= 0 {
		ttl = 10 * time.Second
	}
	return &Pending{count: count, ttl: ttl, timeout: 5 * time.Second, now: time.Now}
}

// Describe implements prometheus.Collector.
func (p *Pending) Describe(ch chan<- *prometheus.Desc) { ch <- pendingDesc }

// Collect implements prometheus.Collector.
func (p *Pending) Collect(ch chan<- prometheus.Metric) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if now := p.now(); !p.ok || now.Sub(p.at) >= p.ttl {
		ctx, cancel := context.WithTimeout(context.Background(), p.timeout)
		n, err := p.count(ctx)
		cancel()
		p.at, p.ok, p.last = now, err == nil, n
	}
	if p.ok {
		ch <- prometheus.MustNewConstMetric(pendingDesc, prometheus.GaugeValue, float64(p.last))
	}
}
