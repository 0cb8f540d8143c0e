package picker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lmwarden/lmwarden/agent/adminapi"
	"github.com/lmwarden/lmwarden/agent/placement"
	"github.com/lmwarden/lmwarden/internal/testutil"
	"github.com/lmwarden/lmwarden/picker"
	"github.com/lmwarden/lmwarden/picker/pickertest"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// world is a picker over test hosts, with a gateway in front.
type world struct {
	hosts  []*pickertest.Host
	server *picker.Server
	gw     *pickertest.Gateway
	front  string // the gateway's base URL
}

type worldOpts struct {
	hosts, replicas int
	gw              pickertest.Config
	tune            func(*picker.ServerConfig)
	hashKey         []byte
}

func startWorld(t *testing.T, o worldOpts) *world {
	t.Helper()
	if o.hosts == 0 {
		o.hosts = 3
	}
	w := &world{}
	var list []picker.Host
	for range o.hosts {
		h := pickertest.StartHost(t, pickertest.HostConfig{Replicas: o.replicas, HashKey: o.hashKey})
		w.hosts = append(w.hosts, h)
		list = append(list, picker.Host{Endpoint: h.Endpoint, Admin: h.Admin})
	}
	sc := picker.ServerConfig{
		Config: picker.Config{Hosts: list, PollInterval: 50 * time.Millisecond, PollTimeout: 500 * time.Millisecond, Logger: quiet, HashKey: o.hashKey},
		GRPC:   "127.0.0.1:0", Admin: "127.0.0.1:0", SPOE: "127.0.0.1:0",
	}
	if o.tune != nil {
		o.tune(&sc)
	}
	s, err := picker.NewServer(sc)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	w.server = s
	testutil.Eventually(t, 10*time.Second, "every host polled and healthy", func() bool {
		n := 0
		for _, h := range s.Registry().Hosts() {
			if h.Healthy {
				n++
			}
		}
		return n == o.hosts
	})
	o.gw.ExtProc = s.GRPCAddr()
	gw, err := pickertest.New(o.gw)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gw.Close)
	srv := httptest.NewServer(gw)
	t.Cleanup(srv.Close)
	w.gw, w.front = gw, srv.URL
	return w
}

// turn sends one streamed Anthropic request of a conversation through the
// gateway and returns its status and body.
func (w *world) turn(t testing.TB, session string, n int) (int, string) {
	t.Helper()
	body := fmt.Sprintf(`{"model":"qwen3-4b","max_tokens":8,"stream":true,"messages":[{"role":"user","content":"conversation %s turn %d: %s"}]}`,
		session, n, strings.Repeat("history ", 30+10*n))
	req, _ := http.NewRequest("POST", w.front+"/v1/messages", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if session != "" {
		req.Header.Set("X-Session-Id", session)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("session %s turn %d: %v", session, n, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// hostOf maps each session hash to the host the picker keeps it on.
func (w *world) sessions(t testing.TB) map[string]int {
	out := map[string]int{}
	for _, s := range w.server.Registry().Model().Sessions(time.Now(), 0) {
		out[s.Hash] = s.Replica
	}
	return out
}

// hostSessions is, per host, the session hashes its own warden saw.
func (w *world) hostSessions() []map[string]bool {
	out := make([]map[string]bool, len(w.hosts))
	for i, h := range w.hosts {
		out[i] = map[string]bool{}
		for _, s := range h.Warden.Models()[0].Sessions(time.Now(), 0) {
			out[i][s.Hash] = true
		}
	}
	return out
}

func TestParseHost(t *testing.T) {
	for _, c := range []struct{ in, ep, admin string }{
		{"10.0.0.7:8000", "10.0.0.7:8000", "http://10.0.0.7:9100"},
		{"[fd00::7]:8000", "[fd00::7]:8000", "http://[fd00::7]:9100"},
		{"10.0.0.7:8000=http://10.0.0.7:9200/", "10.0.0.7:8000", "http://10.0.0.7:9200"},
		{"[::ffff:10.0.0.7]:8000", "10.0.0.7:8000", "http://10.0.0.7:9100"},
	} {
		h, err := picker.ParseHost(c.in, picker.DefaultAdminPort)
		if err != nil || h.Endpoint != c.ep || h.Admin != c.admin {
			t.Errorf("ParseHost(%q) = %+v, %v; want %s %s", c.in, h, err, c.ep, c.admin)
		}
	}
	for _, bad := range []string{"gpu-1:8000", "10.0.0.7", "10.0.0.7:0", "10.0.0.7:8000=ftp://x", "10.0.0.7:8000=http://x/api"} {
		if _, err := picker.ParseHost(bad, picker.DefaultAdminPort); err == nil {
			t.Errorf("ParseHost(%q) accepted", bad)
		}
	}
	if _, err := picker.ParseHosts([]string{"10.0.0.7:8000", "10.0.0.7:8000"}, 9100); err == nil {
		t.Error("a duplicated endpoint was accepted")
	}
}

// Conversations stay on their host across turns, new ones spread over the
// hosts, and every host's warden saw exactly the conversations the picker
// placed there.
func TestGatewayKeepsConversationsOnTheirHost(t *testing.T) {
	w := startWorld(t, worldOpts{})
	const sessions, turns = 9, 3
	for n := range turns {
		for s := range sessions {
			if code, body := w.turn(t, fmt.Sprint("conv-", s), n); code != 200 || !strings.Contains(body, "message_stop") {
				t.Fatalf("conv-%d turn %d: %d %s", s, n, code, body)
			}
		}
	}
	st := w.server.Registry().Model().Status()
	if st.StickyShare != 1 {
		t.Errorf("sticky share %v, want 1 (stayed %d, moved %d)", st.StickyShare, st.Stayed, st.Moved)
	}
	per := map[int]int{}
	for _, h := range w.sessions(t) {
		per[h]++
	}
	for i := range w.hosts {
		if per[i] == 0 {
			t.Errorf("host %d got no conversation: %v", i, per)
		}
	}
	testutil.Eventually(t, 5*time.Second, "in flight back to 0", func() bool {
		return w.server.Registry().Model().Status().InFlight == 0
	})
	// The picker and the wardens hash with different keys here: compare
	// counts, each warden's table holding one entry per conversation.
	seen := w.hostSessions()
	total := 0
	for i, s := range seen {
		if len(s) != per[i] {
			t.Errorf("host %d's warden saw %d conversations, the picker placed %d there", i, len(s), per[i])
		}
		total += len(s)
	}
	if total != sessions {
		t.Errorf("the wardens saw %d conversations in all, want %d", total, sessions)
	}
}

// With one session-hash key for the picker and the hosts, the same
// conversation has the same hash everywhere: a restarted picker learns
// from the hosts where each conversation is.
func TestRestartedPickerLearnsConversationsFromTheHosts(t *testing.T) {
	key := []byte("0123456789abcdef")
	w := startWorld(t, worldOpts{hashKey: key})
	for s := range 6 {
		if code, _ := w.turn(t, fmt.Sprint("c", s), 0); code != 200 {
			t.Fatalf("status %d", code)
		}
	}
	before := w.sessions(t)
	seen := w.hostSessions()
	for h, host := range before {
		if !seen[host][h] {
			t.Errorf("session %s: the picker put it on host %d, whose warden does not have it", h, host)
		}
	}
	var list []picker.Host
	for _, h := range w.hosts {
		list = append(list, picker.Host{Endpoint: h.Endpoint, Admin: h.Admin})
	}
	fresh, err := picker.NewRegistry(picker.Config{Hosts: list, HashKey: key, PollInterval: 50 * time.Millisecond, SessionSync: time.Minute, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	fresh.Start(context.Background())
	defer fresh.Close()
	testutil.Eventually(t, 10*time.Second, "the new picker knows every conversation", func() bool {
		return fresh.Model().LiveSessions() == len(before)
	})
	for _, s := range fresh.Model().Sessions(time.Now(), 0) {
		if before[s.Hash] != s.Replica {
			t.Errorf("session %s: host %d before, %d learned", s.Hash, before[s.Hash], s.Replica)
		}
	}
	for s := range 6 {
		p, err := fresh.Pick(picker.Request{SessionID: fmt.Sprint("c", s), Now: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		if p.Kind != placement.KindSticky {
			t.Errorf("c%d: placed %s, want sticky", s, p.Kind)
		}
		fresh.Done(p)
	}
}

// Every body mode a gateway can run with carries the request and the
// streamed answer intact, and ends the request's in-flight count.
func TestEveryBodyMode(t *testing.T) {
	modes := []pickertest.Mode{pickertest.None, pickertest.Buffered, pickertest.Streamed, pickertest.FullDuplex}
	for _, req := range modes {
		for _, resp := range modes {
			if resp == pickertest.Buffered {
				continue // a streamed answer is not buffered by a gateway in front of a model server
			}
			t.Run(fmt.Sprintf("request_%s_response_%s", req, resp), func(t *testing.T) {
				// allow_mode_override: the picker's override keeps the
				// body modes, or leaves a full-duplex stream as it is.
				w := startWorld(t, worldOpts{hosts: 2, gw: pickertest.Config{RequestBody: req, ResponseBody: resp, AllowModeOverride: true}})
				for n := range 2 {
					code, body := w.turn(t, "mode", n)
					if code != 200 || !strings.Contains(body, "message_stop") {
						t.Fatalf("turn %d: %d %q", n, code, body)
					}
				}
				if w.gw.Stats.Mismatch.Load() != 0 {
					t.Error("header and metadata disagreed")
				}
				testutil.Eventually(t, 5*time.Second, "in flight back to 0", func() bool {
					return w.server.Registry().Model().Status().InFlight == 0
				})
			})
		}
	}
}

// A host that dies under load: requests keep succeeding (the gateway
// falls back down the list until the picker sees the host down), the
// host's conversations are placed again on the others, and it comes back
// once it answers again.
func TestDeadHostLosesNoRequest(t *testing.T) {
	// allow_mode_override on: the response head is asked for only while a
	// host is in doubt, so most fallbacks are not reported, and the
	// conversations move when the host is seen down.
	for _, override := range []bool{false, true} {
		t.Run(fmt.Sprintf("allow_mode_override_%v", override), func(t *testing.T) {
			testDeadHostLosesNoRequest(t, pickertest.Config{AllowModeOverride: override})
		})
	}
}

func testDeadHostLosesNoRequest(t *testing.T, gw pickertest.Config) {
	w := startWorld(t, worldOpts{gw: gw})
	const sessions = 12
	for s := range sessions {
		if code, _ := w.turn(t, fmt.Sprint("k", s), 0); code != 200 {
			t.Fatalf("status %d", code)
		}
	}
	on := w.sessions(t)
	victim := 0
	for _, h := range on {
		victim = h
		break
	}
	w.hosts[victim].Stop()
	// Its idle connections are dead: a request on one fails after it
	// went up (EOF; seen once in a CI run), which is the gateway's race
	// with the host's FIN, not the picker's (it never sends one twice).
	w.gw.CloseIdleConnections()
	var mu sync.Mutex
	failed := 0
	var wg sync.WaitGroup
	for s := range sessions {
		wg.Go(func() {
			for n := 1; n <= 3; n++ {
				if code, body := w.turn(t, fmt.Sprint("k", s), n); code != 200 {
					mu.Lock()
					failed++
					mu.Unlock()
					t.Errorf("k%d turn %d: %d %s", s, n, code, body)
				}
			}
		})
	}
	wg.Wait()
	if failed > 0 {
		t.Fatalf("%d requests failed", failed)
	}
	testutil.Eventually(t, 10*time.Second, "the dead host marked down", func() bool {
		return w.server.Registry().Hosts()[victim].Down
	})
	// A conversation moves on its first turn after its host is seen down
	// (turns before that fell back without the picker hearing of it when
	// the response head is not asked for; on a loaded machine all three
	// may come before the polls fail).
	for s := range sessions {
		if code, body := w.turn(t, fmt.Sprint("k", s), 4); code != 200 {
			t.Errorf("k%d's turn after the host was marked down: %d %s", s, code, body)
		}
	}
	for h, host := range w.sessions(t) {
		if host == victim {
			t.Errorf("session %s still on the dead host %d", h, victim)
		}
	}
	if w.gw.Stats.Retried.Load() == 0 && w.server.Registry().Model().Status().Requests["repinned"] == 0 {
		t.Error("neither a fallback nor a re-placement happened")
	}
}

// With allow_mode_override, the answer to the request headers turns the
// response head off while the picked host is not in doubt (it answered its
// last poll): one exchange before the first byte instead of two. The
// request still leaves its host's count at the stream's end. With
// ServedReportAlways, or a gateway that does not allow overrides, every
// response head is sent.
func TestModeOverrideSkipsTheResponseHead(t *testing.T) {
	const turns = 6
	slowPolls := func(report picker.ServedReport) func(*picker.ServerConfig) {
		return func(sc *picker.ServerConfig) {
			// Polls far apart: no host is in doubt for two intervals, on
			// a loaded machine too.
			sc.PollInterval, sc.ServedReport = 5*time.Second, report
		}
	}
	for _, c := range []struct {
		name     string
		report   picker.ServedReport
		override bool
		heads    uint64
	}{
		{"auto", picker.ServedReportAuto, true, 0},
		{"always", picker.ServedReportAlways, true, turns},
		{"not_allowed", picker.ServedReportAuto, false, turns},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := startWorld(t, worldOpts{tune: slowPolls(c.report), gw: pickertest.Config{AllowModeOverride: c.override}})
			for n := range turns {
				if code, body := w.turn(t, "override", n); code != 200 || !strings.Contains(body, "message_stop") {
					t.Fatalf("turn %d: %d %q", n, code, body)
				}
			}
			if got := w.gw.Stats.ResponseHeads.Load(); got != c.heads {
				t.Errorf("%d response heads sent to the picker, want %d", got, c.heads)
			}
			testutil.Eventually(t, 5*time.Second, "in flight back to 0", func() bool {
				return w.server.Registry().Model().Status().InFlight == 0
			})
			if got := len(w.sessions(t)); got != 1 {
				t.Errorf("%d conversations, want 1", got)
			}
		})
	}
}

// A host whose warden starts shutting down (readyz 503) takes no new
// conversations; its own in-flight requests are not the picker's concern.
func TestDrainingHostTakesNothingNew(t *testing.T) {
	w := startWorld(t, worldOpts{hosts: 2})
	w.hosts[1].Drain()
	testutil.Eventually(t, 10*time.Second, "the draining host out", func() bool {
		return !w.server.Registry().Hosts()[1].Healthy
	})
	for s := range 6 {
		if code, _ := w.turn(t, fmt.Sprint("d", s), 0); code != 200 {
			t.Fatalf("status %d", code)
		}
	}
	for h, host := range w.sessions(t) {
		if host == 1 {
			t.Errorf("session %s placed on the draining host", h)
		}
	}
}

// No ready host: the picker answers 503 with Retry-After itself; the
// gateway never waits on a dead host.
func TestNoReadyHostIs503(t *testing.T) {
	w := startWorld(t, worldOpts{hosts: 2})
	for _, h := range w.hosts {
		h.Stop()
	}
	testutil.Eventually(t, 10*time.Second, "every host down", func() bool { return !w.server.Registry().Ready() })
	req, _ := http.NewRequest("POST", w.front+"/v1/messages", strings.NewReader(`{"model":"m","max_tokens":1,"messages":[]}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(b), "no_host_ready") {
		t.Errorf("got %d %v %s, want 503 with Retry-After", resp.StatusCode, resp.Header, b)
	}
	rz, err := http.Get("http://" + w.server.AdminAddr() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	rz.Body.Close()
	if rz.StatusCode != 503 {
		t.Errorf("/readyz %d with no host, want 503", rz.StatusCode)
	}
}

// The subset hint restricts the pick; a subset with no host of the
// picker's is 503.
func TestSubsetHint(t *testing.T) {
	w := startWorld(t, worldOpts{})
	only := w.hosts[2].Endpoint
	gw, err := pickertest.New(pickertest.Config{ExtProc: w.server.GRPCAddr(), Subset: []string{only}})
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Close()
	srv := httptest.NewServer(gw)
	defer srv.Close()
	w.front = srv.URL
	for s := range 6 {
		if code, _ := w.turn(t, fmt.Sprint("sub", s), 0); code != 200 {
			t.Fatalf("status %d", code)
		}
	}
	if got := gw.Served(); got[only] != 6 || len(got) != 1 {
		t.Errorf("served %v, want all 6 on %s", got, only)
	}
	gw2, _ := pickertest.New(pickertest.Config{ExtProc: w.server.GRPCAddr(), Subset: []string{"192.0.2.1:8000"}})
	defer gw2.Close()
	srv2 := httptest.NewServer(gw2)
	defer srv2.Close()
	w.front = srv2.URL
	if code, _ := w.turn(t, "sub-x", 0); code != 503 {
		t.Errorf("a subset of no host: %d, want 503", code)
	}
}

// A client that goes away mid-answer cancels the stream; the request
// leaves the picker's in-flight count.
func TestCancelledClientEndsTheRequest(t *testing.T) {
	w := startWorld(t, worldOpts{hosts: 1})
	ctx, cancel := context.WithCancel(context.Background())
	body := `{"model":"qwen3-4b","max_tokens":4000,"stream":true,"messages":[{"role":"user","content":"a long answer please"}]}`
	req, _ := http.NewRequestWithContext(ctx, "POST", w.front+"/v1/messages", strings.NewReader(body))
	req.Header.Set("X-Session-Id", "cancel-me")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	if _, err := resp.Body.Read(buf); err != nil {
		t.Fatal(err)
	}
	if n := w.server.Registry().Model().Status().InFlight; n != 1 {
		t.Errorf("in flight %d while the answer streams, want 1", n)
	}
	cancel()
	resp.Body.Close()
	testutil.Eventually(t, 10*time.Second, "in flight back to 0 after the client left", func() bool {
		return w.server.Registry().Model().Status().InFlight == 0
	})
}

// The admin API: hosts, the model in the warden's shape, readiness, and
// every family in /metrics documented.
func TestAdminAPI(t *testing.T) {
	w := startWorld(t, worldOpts{hosts: 2})
	w.turn(t, "adm", 0)
	base := "http://" + w.server.AdminAddr()
	var hr picker.HostsResponse
	// A host's replicas turn ready one poll at a time after its start
	// (one of two ready was seen in a CI run): wait for the poll that
	// sees both.
	testutil.Eventually(t, 10*time.Second, "host 0's two replicas ready in /api/v1/hosts", func() bool {
		getJSON(t, base+"/api/v1/hosts", &hr)
		return len(hr.Hosts) == 2 && hr.Hosts[0].Load.Ready == 2
	})
	if !hr.Ready || len(hr.Hosts) != 2 || hr.Hosts[0].Load.Ready != 2 || hr.Hosts[0].Endpoint != w.hosts[0].Endpoint {
		t.Errorf("hosts: %+v", hr)
	}
	var mr adminapi.ModelsResponse
	getJSON(t, base+"/api/v1/models", &mr)
	if len(mr.Models) != 1 || len(mr.Models[0].Replicas) != 2 || mr.Models[0].Sessions != 1 {
		t.Errorf("models: %+v", mr)
	}
	var sr adminapi.SessionsResponse
	getJSON(t, base+"/api/v1/sessions", &sr)
	if sr.Total != 1 || len(sr.Sessions) != 1 {
		t.Errorf("sessions: %+v", sr)
	}
	resp, err := http.Get(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("/readyz %d", resp.StatusCode)
	}
	resp, err = http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`lmwarden_picker_picks_total{outcome="picked"} 1`, `lmwarden_picker_host_healthy{host="` + w.hosts[0].Endpoint + `"} 1`, "lmwarden_picker_streams_total 1"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("%s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}
