package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/lmwarden/agent/adminapi"
	"github.com/lmwarden/lmwarden/internal/vllmmetrics"
	"github.com/lmwarden/lmwarden/picker"
)

// placementKinds says, after a run, how the picker placed requests over
// the hosts and how each host's warden placed them over its replicas
// (counts by placement kind since the start, and what is still in
// flight): a run that loses hit rate says here whether conversations
// moved between hosts (the picker's spilled or repinned), between a
// host's replicas (a warden's spilled), or stayed put (then the replicas
// lost the cache themselves). For the 25-35 point losses under load
// (docs/multihost.md), cause not yet known.
func placementKinds(tb testing.TB, pk *picker.Server, hosts []*netHost) string {
	tb.Helper()
	st := pk.Registry().Model().Status()
	var b strings.Builder
	fmt.Fprintf(&b, "picker: %s, sticky share %.2f, in flight %d", kinds(st.Requests), st.StickyShare, st.InFlight)
	c := &http.Client{Timeout: 5 * time.Second}
	for i, h := range hosts {
		var mr adminapi.ModelsResponse
		resp, err := c.Get(h.admin() + "/api/v1/models")
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&mr)
			resp.Body.Close()
		}
		if err != nil || len(mr.Models) == 0 {
			fmt.Fprintf(&b, "; host %d: %v", i+1, err)
			continue
		}
		m := mr.Models[0]
		var waiting float64
		var sessions []int
		var kv, hit []string
		for _, r := range m.Replicas {
			waiting += r.Waiting
			sessions = append(sessions, r.Sessions)
			kv = append(kv, fmt.Sprintf("%.2f", r.KVUsed))
			hit = append(hit, fmt.Sprintf("%.2f", r.PrefixHitRate))
		}
		fmt.Fprintf(&b, "; host %d warden: %s, in flight %d, waiting %.0f, sessions by replica %v, KV used %v, prefix hit %v",
			i+1, kinds(m.Requests), m.InFlight, waiting, sessions, kv, hit)
	}
	return b.String()
}

// kinds writes counts by kind in a stable order.
func kinds(m map[string]uint64) string {
	var ks []string
	for k, v := range m {
		if v > 0 {
			ks = append(ks, fmt.Sprintf("%s=%d", k, v))
		}
	}
	sort.Strings(ks)
	return "{" + strings.Join(ks, " ") + "}"
}

// replicaTotals reads every host's replicas' own counters (since their
// last restart: freshCaches restarts them before each front tier's run)
// and says the pooled prefix-cache hit rate and the preemptions: set
// beside the bench's hit rate (the same counters, polled through the
// window) it tells a measurement that went wrong from caches that lost
// entries (preemptions: the replicas ran out of KV blocks).
func replicaTotals(tb testing.TB, hosts []*netHost) string {
	tb.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	var hits, queries, preempted float64
	var byReplica []string
	for _, h := range hosts {
		for _, u := range h.metricsURLs() {
			resp, err := c.Get(u)
			if err != nil {
				byReplica = append(byReplica, "?")
				continue
			}
			fams, err := vllmmetrics.Parse(resp.Body, resp.Header)
			resp.Body.Close()
			if err != nil {
				byReplica = append(byReplica, "?")
				continue
			}
			sum := func(names []string) float64 {
				var v float64
				for _, m := range vllmmetrics.Find(fams, names).GetMetric() {
					v += vllmmetrics.Value(m)
				}
				return v
			}
			h, q, p := sum(vllmmetrics.PrefixHits), sum(vllmmetrics.PrefixQueries), sum(vllmmetrics.Preemptions)
			hits, queries, preempted = hits+h, queries+q, preempted+p
			byReplica = append(byReplica, fmt.Sprintf("%.2f/%.0f", h/max(q, 1), p))
		}
	}
	return fmt.Sprintf("replicas' own prefix hit since restart %.1f%% (%.0f of %.0f tokens), preemptions %.0f; by replica hit/preemptions %v",
		100*hits/max(queries, 1), hits, queries, preempted, byReplica)
}
