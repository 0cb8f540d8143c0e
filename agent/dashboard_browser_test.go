package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/lmwarden/lmwarden/agent"
	"github.com/lmwarden/lmwarden/agent/adminapi"
	"github.com/lmwarden/lmwarden/agent/config"
	"github.com/lmwarden/lmwarden/internal/testutil"
	"github.com/lmwarden/lmwarden/l7"
	"github.com/lmwarden/lmwarden/sim"
)

// The dashboard test drives a real browser (Debian's chromium, headless)
// against the real thing: four simulated replicas, the warden with its
// admin server and the dashboard, and the userspace shim in front, with
// sessions sent through the shim's frontend.

const (
	dashboardModel = "qwen3-4b"
	// seriesStep replaces the 10 s resolution so bars appear within seconds.
	seriesStep = time.Second
)

func TestDashboardShowsWhatTheAPIReports(t *testing.T) {
	env := mustDashboardEnv(t)
	sent := env.sendSessions(t, 6, 3)
	env.sendMalformed(t) // the shim answers it 400 itself
	env.waitStill(t, sent)

	ctx := mustBrowser(t)
	mustDo(t, ctx, chromedp.Navigate(env.admin+"/#models"),
		chromedp.WaitVisible(chromedp.CSS(`[data-model="`+dashboardModel+`"] [data-replica-row]`)))

	t.Run("models card equals GET /api/v1/models", func(t *testing.T) {
		card := waitCardMatchesAPI(t, ctx, env)
		if len(card.Rows) != 4 {
			t.Fatalf("replica rows = %d, want 4", len(card.Rows))
		}
		if card.Since == "" {
			t.Errorf("no counters-since line")
		}
		saveScreenshot(t, ctx, "dashboard-models.png")
	})

	t.Run("policy cost adds admission and each replica's live context", func(t *testing.T) {
		setPolicy := func(p config.Policy) {
			if err := env.warden.Model(dashboardModel).SetPolicy(p); err != nil {
				t.Fatal(err)
			}
		}
		setPolicy(config.PolicyCost)
		defer setPolicy(config.PolicySticky)
		card := waitCardMatchesAPI(t, ctx, env)
		t.Logf("admission pill %q, replica 0 live context %q", card.Pills["admission"].Text, card.Rows[0]["live_context"].Text)
		if card.Pills["admission"].Text != "Admission auto" || !strings.HasSuffix(card.Rows[0]["live_context"].Text, " / 46.7k") {
			t.Errorf("admission pill %q, live context %q: want auto (not engaged) and the 46,720-token budget", card.Pills["admission"].Text, card.Rows[0]["live_context"].Text)
		}
	})

	t.Run("history, errors and the warden line equal the API", func(t *testing.T) {
		h := waitHistoryMatchesAPI(t, ctx, env, sent)
		t.Logf("time to first byte: %d responses, p50 %s s, p95 %s s; %d replica histories", h.Responses, h.P50, h.P95, len(h.Replicas))
		saveScreenshot(t, ctx, "dashboard-models-history.png")
	})

	t.Run("affinity switch turns affinity off through the API", func(t *testing.T) {
		// Accept the confirmation the switch opens; the write is refused
		// (the page has no token yet), and the prompt for the token that
		// follows gets the warden's.
		dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
		asked := make(chan string, 2)
		go func() {
			for ev, err := range dialogs {
				if err != nil {
					return
				}
				params := page.HandleJavaScriptDialogParams{Accept: true}
				if ev.Type == page.DialogTypePrompt {
					params.PromptText = env.warden.AdminToken()
				}
				if _, err := chromedp.Call(ctx, page.HandleJavaScriptDialog, params); err != nil {
					t.Errorf("answer dialog: %v", err)
				}
				asked <- string(ev.Type) + ": " + ev.Message
				if ev.Type == page.DialogTypePrompt {
					return
				}
			}
		}()
		mustDo(t, ctx, chromedp.Click(chromedp.CSS(`[data-affinity-switch="`+dashboardModel+`"]`)))
		for _, want := range []string{"OFF", "admin token"} {
			select {
			case msg := <-asked:
				t.Logf("answered %q", firstLine(msg))
				if !strings.Contains(msg, want) {
					t.Errorf("dialog %q does not say %q", msg, want)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("no dialog saying %q", want)
			}
		}
		testutil.Eventually(t, 10*time.Second, "affinity off in the API", func() bool {
			return !env.model(t).Affinity
		})
		testutil.Eventually(t, 10*time.Second, "the pill to say Affinity off", func() bool {
			txt := mustRun(t, ctx, chromedp.Evaluate[string](`document.querySelector('[data-model="`+dashboardModel+`"] [data-pill="affinity"]').textContent`))
			return txt == "Affinity off"
		})
		saveScreenshot(t, ctx, "dashboard-models-affinity-off.png")
	})

	t.Run("stats page has bars for the traffic sent", func(t *testing.T) {
		mustDo(t, ctx, chromedp.Navigate(env.admin+"/#stats"),
			chromedp.WaitVisible(chromedp.CSS(`[data-stats-model="`+dashboardModel+`"] [data-chart="prompt"] [data-bar]`)))
		bars := mustRun(t, ctx, chromedp.Evaluate[chartSums](chartSumsJS))
		t.Logf("bars: %d prompt, %d completion; step %v s", bars.PromptBars, bars.CompletionBars, bars.Step)
		if bars.PromptBars == 0 || bars.CompletionBars == 0 {
			t.Fatalf("bars = %+v, want bars in both charts", bars)
		}
		// Every token the replicas counted is in the bars: the warden read
		// the baseline before the first request.
		if !sameTokens(bars.Cached, sent.hits) {
			t.Errorf("cached tokens in the bars = %.1f, want the replicas' prefix-cache hits %.0f", bars.Cached, sent.hits)
		}
		if bars.Cached+bars.Computed < sent.promptTokens-0.5 {
			t.Errorf("prompt tokens in the bars = %.1f, want at least the %.0f sent", bars.Cached+bars.Computed, sent.promptTokens)
		}
		if !sameTokens(bars.Completion, sent.completionTokens) {
			t.Errorf("completion tokens in the bars = %.1f, want the %.0f received", bars.Completion, sent.completionTokens)
		}
		if bars.Hatched == 0 {
			t.Errorf("no hatched (cached) bar segment")
		}
		if !strings.HasPrefix(bars.Summary, "Cache hit over the last hour: ") || !strings.Contains(bars.Summary, "%") {
			t.Errorf("summary = %q, want the cache hit over the last hour in %%", bars.Summary)
		}
		saveScreenshot(t, ctx, "dashboard-stats.png")
	})

	t.Run("a draining replica says so, and why it takes no placements", func(t *testing.T) {
		m := env.warden.Model(dashboardModel)
		if err := m.SetDraining(2, true); err != nil {
			t.Fatal(err)
		}
		defer m.SetDraining(2, false)
		mustDo(t, ctx, chromedp.Navigate(env.admin+"/#models"), chromedp.WaitVisible(chromedp.CSS(`[data-replica-history]`)))
		want := env.model(t).Replicas[2].Reason
		if !strings.HasPrefix(want, "draining") {
			t.Fatalf("API reason %q", want)
		}
		var seen []replicaReason
		testutil.Eventually(t, 10*time.Second, "the page to show the drain", func() bool {
			seen = mustRun(t, ctx, chromedp.Evaluate[[]replicaReason](reasonsJS))
			return len(seen) == 4 && seen[2].Cell == want && seen[2].History == want && seen[2].Verdict == "‖ draining"
		})
		saveScreenshot(t, ctx, "dashboard-models-draining.png")
		for i, r := range seen {
			if i != 2 && (r.Cell != "" || r.History != "" || r.Verdict != "✓ yes") {
				t.Errorf("replica %d: %+v, want healthy and no reason", i, r)
			}
		}
	})

	t.Run("at 700 px an unhealthy replica is plain to see", func(t *testing.T) {
		mustDo(t, ctx, chromedp.EmulateViewport(700, 900), chromedp.Navigate(env.admin+"/#models"),
			chromedp.WaitVisible(chromedp.CSS(`[data-replica-history]`)))
		env.sim.Close() // every replica stops answering its polls
		testutil.Eventually(t, 15*time.Second, "the API to call every replica unhealthy", func() bool {
			for _, r := range env.model(t).Replicas {
				if r.Healthy {
					return false
				}
			}
			return true
		})
		var seen unhealthyView
		testutil.Eventually(t, 15*time.Second, "the page to mark every replica unhealthy", func() bool {
			seen = mustRun(t, ctx, chromedp.Evaluate[unhealthyView](unhealthyJS))
			return seen.Badges == 4 && seen.Rows == 4 && seen.Ready == "false"
		})
		if seen.Overflow != 0 {
			t.Errorf("%d unhealthy badges lie outside the 700 px viewport", seen.Overflow)
		}
		if seen.BadgeText != "✗ UNHEALTHY" {
			t.Errorf("badge says %q", seen.BadgeText)
		}
		// Why, beside each replica: the poll that failed, as the API says it.
		api := env.model(t).Replicas
		var reasons []replicaReason
		testutil.Eventually(t, 10*time.Second, "the page to say why each replica is down", func() bool {
			reasons = mustRun(t, ctx, chromedp.Evaluate[[]replicaReason](reasonsJS))
			for i, r := range reasons {
				if r.Cell != api[i].Reason || r.History != api[i].Reason || r.Verdict != "✗ no" || !r.Visible {
					return false
				}
			}
			return len(reasons) == 4
		})
		t.Logf("replica 0: %q", reasons[0].Cell)
		if !strings.HasPrefix(reasons[0].Cell, "GET /health: ") || !strings.Contains(reasons[0].Cell, "connection refused") {
			t.Errorf("reason %q, want the refused GET /health", reasons[0].Cell)
		}
		saveScreenshot(t, ctx, "dashboard-models-700-unhealthy.png")
	})
}

// sendMalformed sends one request head the shim refuses (400) itself.
func (env *dashboardEnv) sendMalformed(tb testing.TB) {
	tb.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(env.frontend, "http://"))
	if err != nil {
		tb.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET / HTTP/1.1\r\nHost x\r\n\r\n")
	if b, _ := io.ReadAll(c); !strings.HasPrefix(string(b), "HTTP/1.1 400") {
		tb.Fatalf("malformed head answered %q", b)
	}
}

// replicaReason is what the page says of one replica's health: the
// verdict and the reason in its row, and the reason on its history.
type replicaReason struct {
	Verdict, Cell, History string
	Visible                bool // the row's reason is drawn (not hidden, not empty)
}

const reasonsJS = `(() => {
  const card = document.querySelector('[data-model="` + dashboardModel + `"]');
  return [...card.querySelectorAll('tr[data-replica-row]')].map((tr) => {
    const td = tr.querySelector('td[data-field="healthy"]');
    const reason = td.querySelector('[data-reason]');
    const hist = card.querySelector('[data-replica-history="' + tr.dataset.replicaRow + '"] [data-reason]');
    return {
      Verdict: td.querySelector('.verdict').textContent,
      Cell: reason ? reason.textContent : '',
      History: hist && !hist.hidden ? hist.textContent : '',
      Visible: !!reason && reason.getBoundingClientRect().height > 0,
    };
  });
})()`

type unhealthyView struct {
	Badges, Rows, Overflow int
	BadgeText, Ready       string
}

const unhealthyJS = `(() => {
  const card = document.querySelector('[data-model="` + dashboardModel + `"]');
  const badges = [...card.querySelectorAll('[data-replica-history].unhealthy .badge.down')];
  return {
    Badges: badges.length,
    Rows: card.querySelectorAll('tr.unhealthy[data-replica-row]').length,
    Overflow: badges.filter((b) => { const r = b.getBoundingClientRect(); return r.right > 700 || r.width === 0; }).length,
    BadgeText: badges.length ? badges[0].textContent : '',
    Ready: document.querySelector('[data-warden="ready"]').dataset.value,
  };
})()`

// pageHistory is what the models card draws of the last hour.
type pageHistory struct {
	Responses int
	P50, P95  string
	Replicas  []struct {
		Index   string
		Healthy string
		Sparks  map[string]struct {
			Points int
			Last   string
		}
	}
	Answered, ReplicaErrors string
	Datapath, Reason, Ready string
	Version, Policy         string
	TTFBSlots               int
}

const readHistoryJS = `(() => {
  const card = document.querySelector('[data-model="` + dashboardModel + `"]');
  const sum = card.querySelector('[data-ttfb-summary]');
  const errs = card.querySelector('[data-errors]');
  const dp = document.querySelector('[data-warden="datapath"]');
  return {
    Responses: Number(sum.dataset.responses), P50: sum.dataset.p50, P95: sum.dataset.p95,
    Replicas: [...card.querySelectorAll('[data-replica-history]')].map((r) => {
      const sparks = {};
      for (const s of r.querySelectorAll('[data-spark]')) sparks[s.dataset.spark] = {Points: Number(s.dataset.points), Last: s.dataset.last};
      return {Index: r.dataset.replicaHistory, Healthy: r.querySelector('.badge').dataset.value, Sparks: sparks};
    }),
    Answered: errs.dataset.answered, ReplicaErrors: errs.dataset.replicaErrors,
    Datapath: dp.dataset.value, Reason: dp.title, Ready: document.querySelector('[data-warden="ready"]').dataset.value,
    Version: document.querySelector('[data-warden="version"]').textContent,
    Policy: card.querySelector('[data-pill="policy"]').textContent,
    TTFBSlots: Number(card.querySelector('[data-chart="ttfb"]').dataset.slots),
  };
})()`

// waitHistoryMatchesAPI reads the history until it equals GET
// /api/v1/stats, /api/v1/models and /api/v1/warden. The traffic is over,
// so what the page shows no longer changes but for new slots of idle
// polls, which it may draw a refresh later than the API has them.
func waitHistoryMatchesAPI(tb testing.TB, ctx context.Context, env *dashboardEnv, sent traffic) pageHistory {
	tb.Helper()
	var h pageHistory
	var last string
	testutil.Eventually(tb, 20*time.Second, "the history to match the API", func() bool {
		h = mustRun(tb, ctx, chromedp.Evaluate[pageHistory](readHistoryJS))
		var st adminapi.StatsResponse
		mustGetAdminJSON(tb, env.admin+"/api/v1/stats?window=1h", &st)
		var info adminapi.WardenInfo
		mustGetAdminJSON(tb, env.admin+"/api/v1/warden", &info)
		diffs := compareHistory(h, st, env.model(tb), info, sent)
		if len(diffs) == 0 {
			return true
		}
		if d := strings.Join(diffs, "\n  "); d != last {
			tb.Logf("the history differs from the API:\n  %s", d)
			last = d
		}
		return false
	})
	return h
}

func compareHistory(h pageHistory, st adminapi.StatsResponse, m adminapi.ModelStatus, info adminapi.WardenInfo, sent traffic) []string {
	var diffs []string
	check := func(what, got, want string) {
		if got != want {
			diffs = append(diffs, fmt.Sprintf("%s: page %q, API %q", what, got, want))
		}
	}
	f := func(p *float64) string {
		if p == nil {
			return ""
		}
		return strconv.FormatFloat(*p, 'g', -1, 64)
	}
	var sm *adminapi.ModelStats
	for i := range st.Models {
		if st.Models[i].Name == dashboardModel {
			sm = &st.Models[i]
		}
	}
	if sm == nil {
		return []string{"model not in /api/v1/stats"}
	}
	sum := sm.Pooled.Summary
	// Every request sent was relayed, timed and counted: the malformed one
	// was answered by the warden, not relayed.
	if sum.Responses != uint64(sent.requests) {
		diffs = append(diffs, fmt.Sprintf("API responses %d, sent %d", sum.Responses, sent.requests))
	}
	check("responses", strconv.Itoa(h.Responses), strconv.FormatUint(sum.Responses, 10))
	check("ttfb p50", h.P50, f(sum.FirstByteP50))
	check("ttfb p95", h.P95, f(sum.FirstByteP95))
	slots := 0
	for _, p := range sm.Pooled.Points {
		if p.FirstByteP50 != nil {
			slots++
		}
	}
	if h.TTFBSlots != slots || slots == 0 {
		diffs = append(diffs, fmt.Sprintf("ttfb chart: %d slots drawn, API %d", h.TTFBSlots, slots))
	}
	answered, _ := json.Marshal(m.Answered)
	check("answered by the warden", h.Answered, string(answered))
	if m.Answered["400"] != 1 {
		diffs = append(diffs, fmt.Sprintf("API answered %v, want the one 400", m.Answered))
	}
	check("replica errors", h.ReplicaErrors, "{}")
	check("datapath", h.Datapath, info.Datapath.Name)
	check("datapath reason", h.Reason, info.Datapath.Reason)
	check("ready", h.Ready, strconv.FormatBool(info.Ready))
	check("version", h.Version, "lmwarden "+info.Build.Version+" · "+info.Build.Revision[:12])
	check("policy pill", h.Policy, "Policy "+m.Effective)
	if len(h.Replicas) != len(m.Replicas) {
		return append(diffs, fmt.Sprintf("replica histories: page %d, API %d", len(h.Replicas), len(m.Replicas)))
	}
	for i, r := range m.Replicas {
		ph := h.Replicas[i]
		check(fmt.Sprintf("replica %d index", i), ph.Index, strconv.Itoa(r.Index))
		check(fmt.Sprintf("replica %d healthy", i), ph.Healthy, strconv.FormatBool(r.Healthy))
		points := sm.Replicas[i].Points
		for key, get := range map[string]func(adminapi.StatsPoint) *float64{
			"running": func(p adminapi.StatsPoint) *float64 { return p.Running },
			"waiting": func(p adminapi.StatsPoint) *float64 { return p.Waiting },
			"kv_used": func(p adminapi.StatsPoint) *float64 { return p.KVUsed },
			"hit_rate": func(p adminapi.StatsPoint) *float64 {
				return p.HitRate
			},
		} {
			n, lastV := 0, (*float64)(nil)
			for _, p := range points {
				if v := get(p); v != nil {
					n++
					lastV = v
				}
			}
			sp := ph.Sparks[key]
			at := fmt.Sprintf("replica %d %s", i, key)
			check(at+" last", sp.Last, f(lastV))
			// The page may draw a few idle slots fewer than the API has
			// by now (it refreshes every 2 s), never more.
			if sp.Points > n || sp.Points < n-4 || n == 0 {
				diffs = append(diffs, fmt.Sprintf("%s: page %d points, API %d", at, sp.Points, n))
			}
		}
	}
	return diffs
}

// ---- the system under test ----------------------------------------------------

type dashboardEnv struct {
	sim      *sim.Servers
	warden   *agent.Warden
	frontend string // http://host:port of the shim
	admin    string // http://host:port of the admin server
}

func mustDashboardEnv(tb testing.TB) *dashboardEnv {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	tb.Cleanup(cancel)

	servers, err := sim.Serve(ctx, sim.ServerConfig{Replicas: 4, Listen: "127.0.0.1:0", Speed: 50, Model: dashboardModel})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { servers.Close() })

	ln, err := l7.Listen("127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	var yaml strings.Builder
	fmt.Fprintf(&yaml, "admin: 127.0.0.1:0\ndatapath: user\npoll_interval: 100ms\nhit_rate_window: 10m\nmodels:\n")
	fmt.Fprintf(&yaml, "  - name: %s\n    frontend: %s\n    affinity: true\n    spill_threshold: 8\n    replicas:\n", dashboardModel, ln.Addr())
	for _, u := range servers.URLs() {
		fmt.Fprintf(&yaml, "      - %s\n", u)
	}
	cfg, err := config.ParseConfig([]byte(yaml.String()))
	if err != nil {
		tb.Fatalf("config: %v\n%s", err, yaml.String())
	}
	w, err := agent.NewWithOptions(cfg, agent.Options{
		Build:    adminapi.BuildInfo{Version: "v0.0.0-test", Revision: "0123456789abcdef", GoVersion: "go1.test"},
		Datapath: adminapi.DatapathInfo{Name: "user", Reason: "--datapath user"},
	})
	if err != nil {
		tb.Fatal(err)
	}
	w.TokenSeries().SetStep(seriesStep)
	if err := w.Start(ctx); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { w.Close() })

	shim := l7.NewShim(w.Model(dashboardModel), l7.Options{})
	go shim.Serve(ln)
	tb.Cleanup(func() { shim.Close() })
	w.SetServing(true)

	env := &dashboardEnv{sim: servers, warden: w, frontend: "http://" + ln.Addr().String(), admin: "http://" + w.AdminAddr()}
	// The token series count from each replica's first read (a baseline):
	// send nothing before every replica has been read once.
	testutil.Eventually(tb, 10*time.Second, "a first poll of every replica", func() bool {
		for _, r := range env.model(tb).Replicas {
			if r.ObservedAt == nil {
				return false
			}
		}
		return true
	})
	return env
}

func (env *dashboardEnv) model(tb testing.TB) adminapi.ModelStatus {
	tb.Helper()
	var resp adminapi.ModelsResponse
	mustGetAdminJSON(tb, env.admin+"/api/v1/models", &resp)
	for _, m := range resp.Models {
		if m.Name == dashboardModel {
			return m
		}
	}
	tb.Fatalf("model %s not in GET /api/v1/models", dashboardModel)
	return adminapi.ModelStatus{}
}

// traffic is what the client side saw, to hold the charts against.
type traffic struct {
	requests                       int
	promptTokens, completionTokens float64
	hits                           float64 // the replicas' own prefix-cache hit counters, summed
}

// sendSessions runs sessions of turns each, a few at a time, through the
// shim: every turn resends the history plus a new user message, as an agent
// does, with the session id header.
func (env *dashboardEnv) sendSessions(tb testing.TB, sessions, turns int) traffic {
	tb.Helper()
	system := strings.Repeat("You are a careful coding agent. Follow the repository's style. ", 60)
	var (
		mu  sync.Mutex
		out traffic
		wg  sync.WaitGroup
		sem = make(chan struct{}, 3)
	)
	for s := range sessions {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			rng := rand.New(rand.NewPCG(uint64(s), 7))
			id := fmt.Sprintf("dash-%08x-%04d", rng.Uint32(), s)
			msgs := []map[string]string{{"role": "system", "content": system}}
			for turn := range turns {
				msgs = append(msgs, map[string]string{"role": "user", "content": fmt.Sprintf("session %d turn %d: %s", s, turn, fillerWords(rng, 300+rng.IntN(200)))})
				var resp struct {
					Choices []struct {
						Message struct{ Content string } `json:"message"`
					} `json:"choices"`
					Usage struct {
						PromptTokens     float64 `json:"prompt_tokens"`
						CompletionTokens float64 `json:"completion_tokens"`
					} `json:"usage"`
				}
				body, _ := json.Marshal(map[string]any{"model": dashboardModel, "messages": msgs, "max_tokens": 24 + rng.IntN(24)})
				req, _ := http.NewRequest(http.MethodPost, env.frontend+"/v1/chat/completions", bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("X-Claude-Code-Session-Id", id)
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					tb.Errorf("session %d turn %d: %v", s, turn, err)
					return
				}
				err = json.NewDecoder(res.Body).Decode(&resp)
				res.Body.Close()
				if err != nil || res.StatusCode != http.StatusOK || len(resp.Choices) == 0 {
					tb.Errorf("session %d turn %d: status %d, %v", s, turn, res.StatusCode, err)
					return
				}
				mu.Lock()
				out.requests++
				out.promptTokens += resp.Usage.PromptTokens
				out.completionTokens += resp.Usage.CompletionTokens
				mu.Unlock()
				msgs = append(msgs, map[string]string{"role": "assistant", "content": resp.Choices[0].Message.Content})
			}
		})
	}
	wg.Wait()
	if tb.Failed() {
		tb.FailNow()
	}
	for i := range 4 {
		out.hits += float64(env.sim.Stats(i).PrefixHits)
	}
	tb.Logf("sent %d requests: %.0f prompt tokens (%.0f prefix-cache hits), %.0f completion tokens", out.requests, out.promptTokens, out.hits, out.completionTokens)
	return out
}

// waitStill waits until the warden has seen the end of the traffic: nothing
// in flight, the replicas idle, and the token series holding every token in
// complete slots. From then on the API's values no longer change.
func (env *dashboardEnv) waitStill(tb testing.TB, sent traffic) {
	tb.Helper()
	testutil.Eventually(tb, 30*time.Second, "the warden to see the traffic end", func() bool {
		m := env.model(tb)
		if m.InFlight != 0 {
			return false
		}
		for _, r := range m.Replicas {
			if r.InFlight != 0 || r.Running != 0 || r.Waiting != 0 {
				return false
			}
		}
		var st adminapi.StatsResponse
		mustGetAdminJSON(tb, env.admin+"/api/v1/stats?window=1h", &st)
		for _, sm := range st.Models {
			if sm.Name == dashboardModel {
				return sameTokens(sm.Pooled.Summary.CompletionTokens, sent.completionTokens)
			}
		}
		return false
	})
}

// ---- reading the page ------------------------------------------------------------

type pageCard struct {
	Pills map[string]pageValue `json:"pills"`
	Rows  []map[string]pageValue
	Since string `json:"since"`
}

type pageValue struct {
	Text  string `json:"text"`
	Value string `json:"value"`
}

const readCardJS = `(() => {
  const card = document.querySelector('[data-model="` + dashboardModel + `"]');
  const val = (e) => ({text: e.textContent.trim(), value: e.dataset.value ?? ''});
  const pills = {};
  for (const p of card.querySelectorAll('[data-pill]')) pills[p.dataset.pill] = val(p);
  const rows = [...card.querySelectorAll('[data-replica-row]')].map((tr) => {
    const row = {};
    for (const td of tr.querySelectorAll('[data-field]')) row[td.dataset.field] = val(td);
    return row;
  });
  return {pills, rows, since: document.querySelector('[data-since]').textContent};
})()`

// waitCardMatchesAPI reads the card until it equals the API (the page
// refreshes every 2 s, so it may lag one refresh behind).
func waitCardMatchesAPI(tb testing.TB, ctx context.Context, env *dashboardEnv) pageCard {
	tb.Helper()
	var card pageCard
	var last string
	testutil.Eventually(tb, 15*time.Second, "the card to match GET /api/v1/models", func() bool {
		before := env.model(tb)
		card = mustRun(tb, ctx, chromedp.Evaluate[pageCard](readCardJS))
		after := env.model(tb)
		diffs := compareCard(card, after)
		if len(diffs) == 0 && sameNumbers(before, after) {
			return true
		}
		if d := strings.Join(diffs, "\n  "); d != last && d != "" {
			tb.Logf("the card differs from the API:\n  %s", d)
			last = d
		}
		return false
	})
	return card
}

func compareCard(card pageCard, m adminapi.ModelStatus) []string {
	var diffs []string
	check := func(what, got, want string) {
		if got != want {
			diffs = append(diffs, fmt.Sprintf("%s: page %q, API %q", what, got, want))
		}
	}
	onOff := map[bool]string{true: "on", false: "off"}
	check("affinity pill", card.Pills["affinity"].Text, "Affinity "+onOff[m.Affinity])
	spill := "Spill threshold " + groupThousands(float64(m.Spill))
	if m.SpillAuto {
		spill += " (auto)"
	}
	check("spill pill", card.Pills["spill_threshold"].Text, spill)
	if m.Stayed+m.Moved == 0 {
		check("sticky pill", card.Pills["sticky"].Text, "Sticky –")
	} else {
		checkPercentText(&diffs, "sticky pill", strings.TrimPrefix(card.Pills["sticky"].Text, "Sticky "), m.StickyShare)
	}
	check("in-flight pill", card.Pills["in_flight"].Text, "In flight "+groupThousands(float64(m.InFlight)))
	if len(card.Rows) != len(m.Replicas) {
		return append(diffs, fmt.Sprintf("rows: page %d, API %d", len(card.Rows), len(m.Replicas)))
	}
	for i, r := range m.Replicas {
		row := card.Rows[i]
		at := func(f string) string { return fmt.Sprintf("replica %d %s", i, f) }
		check(at("index"), row["replica"].Value, strconv.Itoa(r.Index))
		var requests uint64
		for _, n := range r.Requests {
			requests += n
		}
		ints := map[string]float64{
			"in_flight": float64(r.InFlight), "requests": float64(requests), "sessions": float64(r.Sessions), "sticky": float64(r.Sticky), "spilled_in": float64(r.SpilledIn),
			"client_pinned": float64(r.ClientPinned), "running": r.Running, "waiting": r.Waiting,
		}
		for f, v := range ints {
			if r.ObservedAt == nil && (f == "running" || f == "waiting") {
				check(at(f)+" text", row[f].Text, "–") // never read: no number
				continue
			}
			checkValue(&diffs, at(f), row[f].Value, v)
			check(at(f)+" text", row[f].Text, groupThousands(v))
		}
		switch {
		case r.ObservedAt == nil:
			check(at("kv_used")+" text", row["kv_used"].Text, "–")
		default:
			checkValue(&diffs, at("kv_used"), row["kv_used"].Value, r.KVUsed)
			checkPercentText(&diffs, at("kv_used"), row["kv_used"].Text, r.KVUsed)
		}
		if r.HitRateKnown && r.ObservedAt != nil {
			checkValue(&diffs, at("prefix_hit_rate"), row["prefix_hit_rate"].Value, r.PrefixHitRate)
			checkPercentText(&diffs, at("prefix_hit_rate"), row["prefix_hit_rate"].Text, r.PrefixHitRate)
		} else {
			check(at("prefix_hit_rate")+" text", row["prefix_hit_rate"].Text, "–")
		}
		check(at("healthy"), row["healthy"].Value, strconv.FormatBool(r.Healthy))
		if r.Cost == nil {
			check(at("live_context")+" text", row["live_context"].Text, "–")
		} else {
			checkValue(&diffs, at("live_context"), row["live_context"].Value, r.Cost.Live)
			check(at("live_context")+" text", row["live_context"].Text,
				fmt.Sprintf("%.1fk / %.1fk", r.Cost.Live/1000, r.Cost.Budget/1000))
		}
	}
	if m.Cost != nil {
		pill := card.Pills["admission"]
		if !strings.HasPrefix(pill.Text, "Admission "+m.Cost.Admission) || pill.Value != m.Cost.Admission ||
			strings.Contains(pill.Text, "engaged") != m.Cost.AdmissionState.Engaged {
			diffs = append(diffs, fmt.Sprintf("admission pill: page %q, API %s, engaged %v", pill.Text, m.Cost.Admission, m.Cost.AdmissionState.Engaged))
		}
	}
	return diffs
}

// checkValue compares the raw API value the page keeps in data-value.
func checkValue(diffs *[]string, what, pageValue string, want float64) {
	got, err := strconv.ParseFloat(pageValue, 64)
	if err != nil || got != want {
		*diffs = append(*diffs, fmt.Sprintf("%s value: page %q, API %v", what, pageValue, want))
	}
}

// checkPercentText: the page shows one decimal; allow the last digit's
// rounding to differ between JavaScript and Go.
func checkPercentText(diffs *[]string, what, text string, share float64) {
	got, err := strconv.ParseFloat(strings.TrimSuffix(text, "%"), 64)
	if err != nil || !strings.HasSuffix(text, "%") || math.Abs(got-share*100) > 0.051 {
		*diffs = append(*diffs, fmt.Sprintf("%s text: page %q, API %v", what, text, share))
	}
}

func sameNumbers(a, b adminapi.ModelStatus) bool {
	ja, _ := json.Marshal(stripTimes(a))
	jb, _ := json.Marshal(stripTimes(b))
	return bytes.Equal(ja, jb)
}

func stripTimes(m adminapi.ModelStatus) adminapi.ModelStatus {
	m.Replicas = append([]adminapi.ReplicaStatus(nil), m.Replicas...)
	for i := range m.Replicas {
		m.Replicas[i].ObservedAt = nil
	}
	return m
}

// chartSums adds up the bars of the stats page (tokens, not rates).
type chartSums struct {
	PromptBars, CompletionBars int
	Hatched                    int
	Step                       float64
	Cached, Computed           float64
	Completion                 float64
	Summary                    string
}

const chartSumsJS = `(() => {
  const card = document.querySelector('[data-stats-model="` + dashboardModel + `"]');
  const prompt = [...card.querySelectorAll('[data-chart="prompt"] [data-bar]')];
  const completion = [...card.querySelectorAll('[data-chart="completion"] [data-bar]')];
  const step = Number(card.dataset.step);
  const sum = (bars, key) => bars.reduce((a, g) => a + Number(g.dataset[key] || 0), 0) * step;
  return {
    PromptBars: prompt.length, CompletionBars: completion.length, Step: step,
    Hatched: card.querySelectorAll('[data-chart="prompt"] rect[data-series="cached"][fill^="url("]').length,
    Cached: sum(prompt, 'cached'), Computed: sum(prompt, 'computed'), Completion: sum(completion, 'completion'),
    Summary: card.querySelector('[data-summary]').textContent,
  };
})()`

// ---- small helpers ---------------------------------------------------------------------

func mustGetAdminJSON(tb testing.TB, url string, v any) {
	tb.Helper()
	resp, err := http.Get(url)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		tb.Fatalf("GET %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		tb.Fatalf("GET %s: %v", url, err)
	}
}

func sameTokens(a, b float64) bool { return math.Abs(a-b) <= 0.5+1e-9*math.Abs(b) }

// groupThousands formats like the page: 12,345.
func groupThousands(v float64) string {
	s := strconv.FormatFloat(math.Round(v), 'f', 0, 64)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if neg {
		s = "-" + s
	}
	return s
}

func fillerWords(rng *rand.Rand, n int) string {
	vocab := []string{"parse", "the", "config", "file", "and", "return", "an", "error", "when", "field", "is", "missing", "test", "handler", "socket", "buffer"}
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(vocab[rng.IntN(len(vocab))])
	}
	return b.String()
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
