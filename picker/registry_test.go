package picker

import (
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"
)

// load sets what host i's warden "said" (as a poll would) and reorders.
func (r *Registry) setLoadForTest(i int, l HostLoad) {
	r.mu.RLock()
	hs, m := r.hosts[i], r.model
	r.mu.RUnlock()
	hs.mu.Lock()
	hs.load, hs.healthy, hs.polledAt = l, l.Healthy(), time.Now()
	hs.mu.Unlock()
	m.ObserveReplica(i, l.metrics(), time.Now())
	r.reorder()
}

func testRegistry(t *testing.T, cfg Config) *Registry {
	t.Helper()
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg.Hosts = []Host{{Endpoint: "192.0.2.1:8000", Admin: "http://192.0.2.1:9100"}, {Endpoint: "192.0.2.2:8000", Admin: "http://192.0.2.2:9100"}}
	r, err := NewRegistry(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Shedding answers 429 to conversations that have not started, only when
// every host is saturated, and never to a conversation in progress.
func TestShedOnlyNewConversationsWhenEveryHostIsSaturated(t *testing.T) {
	r := testRegistry(t, Config{ShedWaiting: 2})
	now := time.Now()
	r.setLoadForTest(0, HostLoad{Serving: true, Replicas: 2, Ready: 2, Waiting: 1})
	r.setLoadForTest(1, HostLoad{Serving: true, Replicas: 2, Ready: 2, Waiting: 8})
	p, err := r.Pick(Request{SessionID: "old", Now: now})
	if err != nil {
		t.Fatalf("one host has room: %v", err)
	}
	r.Done(p)
	r.setLoadForTest(0, HostLoad{Serving: true, Replicas: 2, Ready: 2, Waiting: 4})
	if _, err := r.Pick(Request{SessionID: "new", Now: now}); !errors.Is(err, ErrShed) {
		t.Errorf("every host at 2 waiting a replica: %v, want ErrShed", err)
	}
	if _, err := r.Pick(Request{Now: now}); !errors.Is(err, ErrShed) {
		t.Errorf("no session id, every host saturated: %v, want ErrShed", err)
	}
	p, err = r.Pick(Request{SessionID: "old", Now: now})
	if err != nil {
		t.Fatalf("a conversation in progress was shed: %v", err)
	}
	r.Done(p)
	if got := r.stats.shed.Load(); got != 2 {
		t.Errorf("shed counted %d, want 2", got)
	}
}

// A host never polled takes nothing; the pick lists the others as
// fallbacks, least loaded first, at most Fallbacks of them.
func TestFallbackOrder(t *testing.T) {
	cfg := Config{Fallbacks: 1}
	cfg.Hosts = []Host{{Endpoint: "192.0.2.1:8000", Admin: "http://192.0.2.1:9100"}, {Endpoint: "192.0.2.2:8000", Admin: "http://192.0.2.2:9100"}, {Endpoint: "192.0.2.3:8000", Admin: "http://192.0.2.3:9100"}}
	r, err := NewRegistry(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Pick(Request{SessionID: "a", Now: time.Now()}); !errors.Is(err, ErrNoEndpoint) {
		t.Fatalf("no host polled yet: %v, want ErrNoEndpoint", err)
	}
	r.setLoadForTest(0, HostLoad{Serving: true, Replicas: 4, Ready: 4, Running: 9})
	r.setLoadForTest(1, HostLoad{Serving: true, Replicas: 4, Ready: 4, Running: 1})
	r.setLoadForTest(2, HostLoad{Serving: true, Replicas: 4, Ready: 4, Running: 5})
	p, err := r.Pick(Request{SessionID: "a", Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"192.0.2.2:8000", "192.0.2.3:8000"}; len(p.Endpoints) != 2 || p.Endpoints[0] != want[0] || p.Endpoints[1] != want[1] {
		t.Errorf("endpoints %v, want %v", p.Endpoints, want)
	}
	// The gateway reports the fallback served: the conversation moves.
	r.Served(p, "192.0.2.3:8000")
	r.Done(p)
	q, _ := r.Pick(Request{SessionID: "a", Now: time.Now()})
	if q.Endpoints[0] != "192.0.2.3:8000" {
		t.Errorf("after the fallback served, the conversation is on %s, want 192.0.2.3:8000", q.Endpoints[0])
	}
	r.Done(q)
	if st := r.Model().Status(); st.InFlight != 0 {
		t.Errorf("in flight %d after every Done", st.InFlight)
	}
}

// A host list that changes keeps the conversations of the hosts that stay.
func TestSetHostsKeepsConversationsOfHostsThatStay(t *testing.T) {
	r := testRegistry(t, Config{})
	r.setLoadForTest(0, HostLoad{Serving: true, Replicas: 1, Ready: 1})
	r.setLoadForTest(1, HostLoad{Serving: true, Replicas: 1, Ready: 1, Running: 5})
	p, _ := r.Pick(Request{SessionID: "s", Now: time.Now()})
	r.Done(p)
	if p.Endpoints[0] != "192.0.2.1:8000" {
		t.Fatalf("placed on %s", p.Endpoints[0])
	}
	hosts := []Host{{Endpoint: "192.0.2.9:8000", Admin: "http://192.0.2.9:9100"}, {Endpoint: "192.0.2.1:8000", Admin: "http://192.0.2.1:9100"}}
	if err := r.SetHosts(hosts); err != nil {
		t.Fatal(err)
	}
	q, err := r.Pick(Request{SessionID: "s", Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if q.Endpoints[0] != "192.0.2.1:8000" || q.Kind.String() != "sticky" {
		t.Errorf("after the change: %v %s, want 192.0.2.1:8000 sticky", q.Endpoints, q.Kind)
	}
	r.Done(q)
}

// The served endpoint is asked for only when a fallback may serve: the
// answer lists one and the pick's host is in doubt (its last poll failed,
// or none succeeded for two poll intervals); always with
// ServedReportAlways; never without fallbacks.
func TestReportServedOnlyWhenTheHostIsInDoubt(t *testing.T) {
	up := HostLoad{Serving: true, Replicas: 2, Ready: 2}
	pick := func(r *Registry, now time.Time) *Pick {
		t.Helper()
		p, err := r.Pick(Request{SessionID: "s", Now: now})
		if err != nil {
			t.Fatal(err)
		}
		r.Done(p)
		return p
	}
	r := testRegistry(t, Config{})
	r.setLoadForTest(0, up)
	r.setLoadForTest(1, up)
	now := time.Now()
	if p := pick(r, now); len(p.Endpoints) != 2 || p.ReportServed {
		t.Errorf("just polled: endpoints %v, report %v; want a fallback and no report", p.Endpoints, p.ReportServed)
	}
	if p := pick(r, now.Add(3*DefaultPollInterval)); !p.ReportServed {
		t.Error("no good poll for three intervals: the served endpoint not asked for")
	}
	r.mu.RLock()
	hs := r.hosts[pick(r, now).Host]
	r.mu.RUnlock()
	hs.mu.Lock()
	hs.failures = 1
	hs.mu.Unlock()
	if p := pick(r, now); !p.ReportServed {
		t.Error("the last poll failed: the served endpoint not asked for")
	}

	always := testRegistry(t, Config{ServedReport: ServedReportAlways})
	always.setLoadForTest(0, up)
	always.setLoadForTest(1, up)
	if p := pick(always, now); !p.ReportServed {
		t.Error("ServedReportAlways: not asked for")
	}

	alone := testRegistry(t, Config{Fallbacks: -1})
	alone.setLoadForTest(0, up)
	alone.setLoadForTest(1, up)
	if p := pick(alone, now.Add(time.Minute)); len(p.Endpoints) != 1 || p.ReportServed {
		t.Errorf("no fallbacks: endpoints %v, report %v; want one and no report", p.Endpoints, p.ReportServed)
	}
	if _, err := ParseServedReport("sometimes"); err == nil {
		t.Error("ParseServedReport accepted \"sometimes\"")
	}
}
