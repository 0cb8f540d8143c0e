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
