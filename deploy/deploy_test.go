package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/lmwarden/agent"
	"github.com/lmwarden/lmwarden/agent/config"
	"github.com/lmwarden/lmwarden/internal/testutil"
	"github.com/lmwarden/lmwarden/l7"
	"github.com/lmwarden/lmwarden/l7/datapath"
	"github.com/lmwarden/lmwarden/sim"
)

// requireTool finds a Debian binary that scripts/deps.sh installs; without
// it the test is skipped, unless CI is set (then deps.sh failed).
func requireTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s not installed (scripts/deps.sh installs Debian's prometheus)", name)
		}
		t.Skipf("%s not installed (Debian package prometheus)", name)
	}
	return p
}

func TestAlertRulesPassPromtool(t *testing.T) {
	promtool := requireTool(t, "promtool")
	for _, args := range [][]string{
		{"check", "rules", "lmwarden-rules.yml"},
		{"check", "config", "prometheus.yml"},
		{"test", "rules", "lmwarden-rules.test.yml"},
	} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = "prometheus"
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// Every alert rule has a promtool unit test that expects it to fire.
func TestEveryAlertRuleIsTested(t *testing.T) {
	rules, _ := os.ReadFile("prometheus/lmwarden-rules.yml")
	tests, _ := os.ReadFile("prometheus/lmwarden-rules.test.yml")
	for _, m := range regexp.MustCompile(`(?m)^\s+- alert: (\w+)`).FindAllSubmatch(rules, -1) {
		if !regexp.MustCompile(`alertname: ` + string(m[1]) + `\s+exp_alerts:\s+- exp_labels`).Match(tests) {
			t.Errorf("alert %s: no promtool test expects it to fire", m[1])
		}
	}
}

// dashboard is the part of the Grafana JSON the tests read.
type dashboard struct {
	Panels []struct {
		Title   string `json:"title"`
		Type    string `json:"type"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
	Templating struct {
		List []struct {
			Name string `json:"name"`
		} `json:"list"`
	} `json:"templating"`
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile("grafana/lmwarden.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("grafana/lmwarden.json: %v", err)
	}
	return d
}

// queries are every PromQL expression of the dashboard (by panel title)
// and of the alert rules.
func queries(t *testing.T) map[string]string {
	out := map[string]string{}
	for _, p := range readDashboard(t).Panels {
		for i, tg := range p.Targets {
			out[fmt.Sprintf("panel %q target %d", p.Title, i)] = tg.Expr
		}
	}
	rules, _ := os.ReadFile("prometheus/lmwarden-rules.yml")
	re := regexp.MustCompile(`(?ms)- alert: (\w+)\s+(?:#[^\n]*\n\s+)*expr: (\|\n(.*?)\n\s+for:|(.*?)\n)`)
	for _, m := range re.FindAllStringSubmatch(string(rules), -1) {
		out["rule "+m[1]] = m[3] + m[4]
	}
	return out
}

var metricName = regexp.MustCompile(`\b(lmwarden_[a-z0-9_]+|vllm:[a-z0-9_:]+|go_[a-z0-9_]+|process_[a-z0-9_]+|up)\b`)

// family is the family a series name belongs to (a histogram's _bucket,
// _sum and _count are its family's).
func family(name string, histograms map[string]bool) string {
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		if base := strings.TrimSuffix(name, suf); base != name && histograms[base] {
			return base
		}
	}
	return name
}

// world is the real thing the dashboard is drawn from: simulated vLLM
// replicas, the warden's control plane and its shim in front of them.
type world struct {
	sim      *sim.Servers
	warden   *agent.Warden
	frontend string
}

func startWorld(t *testing.T) *world {
	t.Helper()
	sv, err := sim.Serve(context.Background(), sim.ServerConfig{Replicas: 2, Listen: "127.0.0.1:0", Speed: 50})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sv.Close() })
	ln, err := l7.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.DefaultConfig()
	cfg.PollInterval = 100 * time.Millisecond
	if err := cfg.ApplyFlags(ln.Addr().String(), "127.0.0.1:0", "user", sv.URLs()); err != nil {
		t.Fatal(err)
	}
	w, err := agent.NewWithOptions(cfg, agent.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	shim := l7.NewShim(w.Models()[0], l7.Options{Datapath: datapath.NewUserPath(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	go shim.Serve(ln)
	t.Cleanup(func() { shim.Close() })
	w.Registry().MustRegister(l7.NewCollector(shim))
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return &world{sim: sv, warden: w, frontend: ln.Addr().String()}
}

// traffic sends two turns of a few streamed conversations, a request the
// replica answers 400, and one malformed head (the shim answers it 400
// itself).
func (wd *world) traffic(t *testing.T) {
	t.Helper()
	for turn := range 2 {
		for s := range 3 {
			body := fmt.Sprintf(`{"model":"qwen3-4b","max_tokens":16,"stream":true,"messages":[{"role":"user","content":"conversation %d: a long shared history of the session so that the cache has blocks to keep %s"}]}`,
				s, strings.Repeat("tok ", 40*(turn+1)))
			req, _ := http.NewRequest("POST", "http://"+wd.frontend+"/v1/messages", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Session-Id", fmt.Sprint("s", s))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("status %d", resp.StatusCode)
			}
		}
	}
	// One the replica refuses itself (a 400 relayed to the client).
	resp, err := http.Post("http://"+wd.frontend+"/v1/messages", "application/json",
		strings.NewReader(`{"model":"qwen3-4b","max_tokens":100000000,"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Fatalf("oversized max_tokens: status %d, want the replica's 400", resp.StatusCode)
	}
	c, err := net.Dial("tcp", wd.frontend)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(c, "GET / HTTP/1.1\r\nHost x\r\n\r\n")
	io.ReadAll(c)
	c.Close()
}

// scraped is every family the warden's /metrics and a replica's /metrics
// export, and which of them are histograms.
func (wd *world) scraped(t *testing.T) (names, histograms map[string]bool) {
	names, histograms = map[string]bool{}, map[string]bool{}
	for _, u := range []string{"http://" + wd.warden.AdminAddr() + "/metrics", wd.sim.URLs()[0] + "/metrics"} {
		resp, err := http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		fams, err := agent.ParseMetrics(resp.Body, resp.Header)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		for n, f := range fams {
			names[n] = true
			if f.GetType().String() == "HISTOGRAM" {
				histograms[n] = true
			}
		}
	}
	return names, histograms
}

// Every metric the dashboard and the rules query is one the warden or
// vLLM (as the simulator serves its names) exports, and each of the
// warden's is documented.
func TestEveryQueriedMetricExists(t *testing.T) {
	wd := startWorld(t)
	names, histograms := wd.scraped(t)
	doc, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for where, q := range queries(t) {
		for _, n := range metricName.FindAllString(q, -1) {
			f := family(n, histograms)
			seen[f] = true
			switch {
			case f == "up": // Prometheus' own, one per scrape target
			case !names[f]:
				t.Errorf("%s: %s is exported by neither the warden nor the simulated vLLM", where, n)
			case strings.HasPrefix(f, "lmwarden_") && !strings.Contains(string(doc), "`"+f+"`"):
				t.Errorf("%s: %s is not in docs/metrics.md", where, f)
			}
		}
	}
	for _, must := range []string{"lmwarden_replica_healthy", "lmwarden_replica_in_flight", "lmwarden_replica_running", "lmwarden_replica_waiting",
		"lmwarden_replica_kv_usage_ratio", "lmwarden_replica_prefix_hit_ratio", "lmwarden_time_to_first_byte_seconds",
		"vllm:time_to_first_token_seconds", "vllm:prefix_cache_hits_total", "vllm:prompt_tokens_total", "lmwarden_shim_answered_total"} {
		if !seen[must] {
			t.Errorf("nothing queries %s", must)
		}
	}
}

// A real Prometheus scrapes the warden and the replicas; every dashboard
// query then has data, and the alert rules load and evaluate.
func TestDashboardQueriesHaveDataFromARealPrometheus(t *testing.T) {
	bin := requireTool(t, "prometheus")
	wd := startWorld(t)
	wd.traffic(t)

	dir := t.TempDir()
	rules, _ := filepath.Abs("prometheus/lmwarden-rules.yml")
	var vllm []string
	for _, u := range wd.sim.URLs() {
		vllm = append(vllm, `"`+strings.TrimPrefix(u, "http://")+`"`)
	}
	conf := fmt.Sprintf(`global: {scrape_interval: 1s, evaluation_interval: 1s}
rule_files: [%q]
scrape_configs:
  - {job_name: lmwarden, static_configs: [{targets: [%q]}]}
  - {job_name: vllm, static_configs: [{targets: [%s]}]}
`, rules, wd.warden.AdminAddr(), strings.Join(vllm, ", "))
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	web := freeAddr(t)
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+web, "--log.level=warn")
	var log strings.Builder
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	query := func(q string) (int, error) {
		resp, err := http.Get("http://" + web + "/api/v1/query?query=" + url.QueryEscape(q))
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		var r struct {
			Status string `json:"status"`
			Error  string `json:"error"`
			Data   struct {
				Result []json.RawMessage `json:"result"`
			} `json:"data"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
			return 0, err
		}
		if r.Status != "success" {
			return 0, fmt.Errorf("%s", r.Error)
		}
		return len(r.Data.Result), nil
	}
	// Both jobs scraped, and enough samples for a rate over the window.
	testutil.Eventually(t, 60*time.Second, "prometheus scraped both jobs 4 times", func() bool {
		n, err := query(`count_over_time(up{job=~"lmwarden|vllm"}[1m]) >= 4 and up == 1`)
		return err == nil && n == 1+len(vllm)
	})
	wd.traffic(t) // inside the rate window
	time.Sleep(2 * time.Second)

	vars := strings.NewReplacer("$__rate_interval", "30s", "$model", ".*", "$vllm_job", "vllm", "$warden_job", "lmwarden")
	var empty []string
	for where, q := range queries(t) {
		if strings.HasPrefix(where, "rule ") {
			continue // alerts are quiet here: their queries are checked by promtool
		}
		n, err := query(vars.Replace(q))
		switch {
		case err != nil:
			t.Errorf("%s: %s: %v", where, q, err)
		case n == 0:
			empty = append(empty, where+": "+q)
		}
	}
	sort.Strings(empty)
	for _, e := range empty {
		t.Errorf("no data: %s", e)
	}

	// The rules load and evaluate without error.
	resp, err := http.Get("http://" + web + "/api/v1/rules")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var rr struct {
		Data struct {
			Groups []struct {
				Rules []struct {
					Name, Health, LastError string
				} `json:"rules"`
			} `json:"groups"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&rr); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range rr.Data.Groups {
		for _, r := range g.Rules {
			n++
			if r.Health == "err" {
				t.Errorf("rule %s: %s", r.Name, r.LastError)
			}
		}
	}
	if n != 13 {
		t.Errorf("prometheus loaded %d rules, want 13\n%s", n, log.String())
	}
}

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// documentedFamilies are the lmwarden_* families docs/metrics.md's tables
// list as exported now (not the renamed or removed ones, nor vLLM's), and
// those its "left off" table names.
func documentedFamilies(t *testing.T) (families, leftOff []string) {
	t.Helper()
	doc, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	name := regexp.MustCompile("`(lmwarden_[a-z0-9_]+)`")
	var section string
	for _, line := range strings.Split(string(doc), "\n") {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			section = h
			continue
		}
		if !strings.HasPrefix(line, "| `") || strings.HasPrefix(section, "Renamed") || strings.HasPrefix(section, "What the poller") {
			continue
		}
		cells := strings.Split(line, "|")
		for _, m := range name.FindAllStringSubmatch(cells[1], -1) {
			if strings.HasPrefix(section, "On the board") {
				leftOff = append(leftOff, m[1])
			} else {
				families = append(families, m[1])
			}
		}
	}
	return families, leftOff
}

// Every family docs/metrics.md documents is on the Grafana board, in an
// alert rule, or in its table of those left off on purpose (with why);
// none is both watched and listed as left off.
func TestEveryDocumentedFamilyIsWatched(t *testing.T) {
	families, leftOff := documentedFamilies(t)
	if len(families) < 50 {
		t.Fatalf("read %d families from docs/metrics.md: the tables moved?", len(families))
	}
	watched := map[string]bool{}
	for _, q := range queries(t) {
		for _, n := range metricName.FindAllString(q, -1) {
			for _, suf := range []string{"_bucket", "_sum", "_count"} {
				n = strings.TrimSuffix(n, suf)
			}
			watched[n] = true
		}
	}
	off := map[string]bool{}
	for _, f := range leftOff {
		off[f] = true
		if watched[f] {
			t.Errorf("%s is listed as left off in docs/metrics.md, yet the board or an alert queries it", f)
		}
	}
	n := 0
	for _, f := range families {
		switch {
		case watched[f]:
			n++
		case !off[f]:
			t.Errorf("%s is documented in docs/metrics.md but on neither the board nor an alert, nor listed as left off", f)
		}
	}
	t.Logf("%d families documented: %d on the board or in an alert, %d left off", len(families), n, len(leftOff))
}
