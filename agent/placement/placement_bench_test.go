package placement

import (
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/lmwarden/lmwarden/agent/config"
)

// BenchmarkPlaceSticky100kSessions measures the placement decision of a
// known session (sticky policy, 4 replicas) with 100k live sessions in the
// table. ns/op and allocs/op are one Place plus its Done; the metrics
// reported beside them are the bytes the table holds per session (heap
// after populating minus before, after GC) and the p50/p99 of Place alone,
// each decision timed separately over 200k samples (timer overhead
// included). Sessions are visited in a scattered order (stride 7919), as
// real traffic would, so the table is not walked in cache order.
func BenchmarkPlaceSticky100kSessions(b *testing.B) {
	m := benchPlace100k(b, config.PolicySticky, epoch)
	if st := m.Status(); st.StickyShare != 1 {
		b.Errorf("sticky share %v", st.StickyShare)
	}
}

// benchPlace100k is the body of the 100k-session placement benchmarks: it
// fills a model of the given policy with 100k sessions, then times one
// Place plus its Done of a known session, and reports bytes per session
// and the p50/p99 of Place alone. It returns the model for checks.
func benchPlace100k(b *testing.B, policy config.Policy, start time.Time) *Model {
	const sessions = 100_000
	ids := make([]string, sessions)
	for i := range ids {
		ids[i] = fmt.Sprintf("%08x-%04x-4%03x-8%03x-%012x", i*2654435761, i&0xffff, i&0xfff, (i>>12)&0xfff, i*40503)
	}
	m := mustModel(b, func(mc *config.ModelConfig) { mc.SessionTTL = time.Hour; mc.Policy = policy })
	now := start

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for _, id := range ids {
		p, err := m.Place(Request{SessionID: id, PromptBytes: 50_000, Now: now})
		if err != nil {
			b.Fatal(err)
		}
		m.Done(p, now)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if m.LiveSessions() != sessions {
		b.Fatalf("live sessions %d", m.LiveSessions())
	}
	bytesPerSession := float64(after.HeapAlloc-before.HeapAlloc) / sessions

	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		now = now.Add(time.Microsecond)
		p, _ := m.Place(Request{SessionID: ids[(i*7919)%sessions], PromptBytes: 50_000, Now: now})
		m.Done(p, now)
	}
	b.StopTimer()

	const samples = 200_000
	lat := make([]time.Duration, samples)
	for i := range lat {
		now = now.Add(time.Microsecond)
		r := Request{SessionID: ids[(i*7919)%sessions], PromptBytes: 50_000, Now: now}
		t0 := time.Now()
		p, _ := m.Place(r)
		lat[i] = time.Since(t0)
		m.Done(p, now)
	}
	slices.Sort(lat)
	b.ReportMetric(bytesPerSession, "B/session")
	b.ReportMetric(float64(lat[samples/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(lat[samples*99/100].Nanoseconds()), "p99-ns")
	return m
}
