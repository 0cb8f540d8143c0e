package agent

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/lmwarden/lmwarden/agent/config"
	"github.com/lmwarden/lmwarden/agent/placement"
)

// ScrapeObserver receives every successful scrape of a replica (or rank):
// the dashboard's token series hangs here. It runs on the poller goroutine.
type ScrapeObserver func(m *placement.Model, replica int, s placement.ReplicaMetrics, now time.Time)

// poller scrapes one target every interval: a replica's URL (per-replica
// shape, feeding one replica) or the one endpoint (feeding every rank from
// the `engine` label). A poll is GET /health then GET /metrics; a failure of
// either counts. After unhealthyAfter failures in a row the target's
// replicas are marked unhealthy; the first good poll brings them back.
type poller struct {
	model          *placement.Model
	base           string // URL without a trailing slash
	replicas       []int  // the replica indices this target feeds
	perEngine      bool
	interval       time.Duration
	timeout        time.Duration
	unhealthyAfter int
	client         *http.Client
	observe        ScrapeObserver
	log            *slog.Logger

	failures int
	down     bool
	warned   bool // said that /metrics has no vLLM series (once until a good poll)
	buf      []placement.ReplicaMetrics
}

func newPollers(m *placement.Model, c *config.Config, client *http.Client, observe ScrapeObserver, log *slog.Logger) []*poller {
	mk := func(base string, replicas []int, perEngine bool) *poller {
		return &poller{
			model: m, base: strings.TrimRight(base, "/"), replicas: replicas, perEngine: perEngine,
			interval: c.PollInterval, timeout: c.PollTimeout, unhealthyAfter: c.UnhealthyAfter,
			client: client, observe: observe, log: log,
			buf: make([]placement.ReplicaMetrics, len(replicas)),
		}
	}
	mc := m.Config()
	if mc.OneEndpoint() {
		ranks := make([]int, mc.Ranks)
		for i := range ranks {
			ranks[i] = i
		}
		return []*poller{mk(mc.Endpoint, ranks, true)}
	}
	ps := make([]*poller, len(mc.Replicas))
	for i, u := range mc.Replicas {
		ps[i] = mk(u, []int{i}, false)
	}
	return ps
}

// run polls until ctx ends; the first poll is immediate.
func (p *poller) run(ctx context.Context) {
	t := time.NewTicker(p.interval)
	defer t.Stop()
	for {
		p.pollOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (p *poller) pollOnce(parent context.Context) {
	ctx, cancel := context.WithTimeout(parent, p.timeout)
	defer cancel()
	err := scrapeHealth(ctx, p.client, p.base)
	if err == nil {
		var fams map[string]*dto.MetricFamily
		if fams, err = scrapeMetrics(ctx, p.client, p.base); err == nil {
			err = checkVLLMSeries(fams)
		}
		if err == nil {
			now := time.Now()
			replicaMetricsFrom(fams, p.perEngine, p.buf)
			for k, i := range p.replicas {
				p.model.ObserveReplica(i, p.buf[k], now)
				if p.observe != nil {
					p.observe(p.model, i, p.buf[k], now)
				}
			}
			if p.down {
				p.log.Info("replica healthy again", "model", p.model.Name(), "url", p.base)
			}
			p.failures, p.down, p.warned = 0, false, false
			return
		}
	}
	if parent.Err() != nil {
		return // shutting down, not a failure
	}
	p.failures++
	reason := pollReason(err)
	for _, i := range p.replicas {
		p.model.PollFailed(i, reason)
	}
	if errors.Is(err, ErrNoVLLMSeries) && !p.warned {
		// Said at once, not after unhealthy_after polls: it is a
		// misconfiguration (a URL that is not vLLM's), not a blip.
		p.warned = true
		p.log.Warn("replica is not a vLLM server: its /metrics has no vllm: series; it stays out of placement until it has", "model", p.model.Name(), "url", p.base)
	}
	if p.failures >= p.unhealthyAfter && !p.down {
		p.down = true
		for _, i := range p.replicas {
			p.model.SetHealthy(i, false)
		}
		p.log.Warn("replica unhealthy", "model", p.model.Name(), "url", p.base, "failed_polls", p.failures, "err", err)
	}
}
