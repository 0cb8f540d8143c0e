package sim

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/lmwarden/lmwarden/internal/testutil"
	"github.com/lmwarden/lmwarden/internal/vllmlb"
)

// mustServe starts a simulator on loopback ports and closes it after the test.
func mustServe(tb testing.TB, cfg ServerConfig) *Servers {
	tb.Helper()
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	if cfg.Profile.Name == "" {
		cfg.Profile = mustProfile(tb, 0)
	}
	if cfg.Speed == 0 {
		cfg.Speed = 200
	}
	s, err := Serve(context.Background(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

// mustPost sends a JSON body and returns the status and whole response.
func mustPost(tb testing.TB, url string, body any, header ...string) (int, []byte) {
	tb.Helper()
	b, ok := body.([]byte)
	if !ok {
		var err error
		if b, err = json.Marshal(body); err != nil {
			tb.Fatal(err)
		}
	}
	req, err := http.NewRequest("POST", url, strings.NewReader(string(b)))
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	return resp.StatusCode, out
}

// mustScrape returns a /metrics page parsed, by metric name.
func mustScrape(tb testing.TB, base string) map[string]*dto.MetricFamily {
	tb.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mf, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	return mf
}

// metricValue is the value of a family's sample with engine=engine.
func metricValue(tb testing.TB, mf map[string]*dto.MetricFamily, name, engine string) float64 {
	tb.Helper()
	f, ok := mf[name]
	if !ok {
		tb.Fatalf("metric %s missing", name)
	}
	for _, m := range f.Metric {
		for _, l := range m.Label {
			if l.GetName() == "engine" && l.GetValue() == engine {
				switch {
				case m.Counter != nil:
					return m.Counter.GetValue()
				case m.Gauge != nil:
					return m.Gauge.GetValue()
				case m.Histogram != nil:
					return float64(m.Histogram.GetSampleCount())
				}
			}
		}
	}
	tb.Fatalf("metric %s has no engine=%q sample", name, engine)
	return 0
}

func chatBody(prefix, suffix string, maxTokens int) map[string]any {
	return map[string]any{"model": "qwen3-4b", "max_tokens": maxTokens,
		"messages": []map[string]any{{"role": "user", "content": prefix + suffix}}}
}

func TestSharedPrefixHitsOnlyOnTheReplicaThatSawIt(t *testing.T) {
	s := mustServe(t, ServerConfig{Replicas: 2})
	u := s.URLs()
	prefix := textOf("shared", 2000)
	for _, step := range []struct {
		replica  int
		wantHits bool
	}{{0, false}, {0, true}, {1, false}} {
		before := mustScrape(t, u[step.replica])
		code, body := mustPost(t, u[step.replica]+"/v1/chat/completions", chatBody(prefix, textOf(fmt.Sprint(step), 10), 4))
		if code != 200 {
			t.Fatalf("status %d: %s", code, body)
		}
		after := mustScrape(t, u[step.replica])
		gained := metricValue(t, after, "vllm:prefix_cache_hits_total", "0") - metricValue(t, before, "vllm:prefix_cache_hits_total", "0")
		if (gained >= 1984) != step.wantHits {
			t.Fatalf("replica %d gained %v hit tokens, want hits=%v", step.replica, gained, step.wantHits)
		}
		var resp struct {
			Usage struct {
				PromptTokensDetails struct {
					CachedTokens int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		json.Unmarshal(body, &resp)
		if float64(resp.Usage.PromptTokensDetails.CachedTokens) != gained {
			t.Fatalf("usage cached_tokens %d, metrics gained %v", resp.Usage.PromptTokensDetails.CachedTokens, gained)
		}
	}
}

func TestRanksHeaderRoutesToTheRankAndMetricsCarryEngineLabels(t *testing.T) {
	s := mustServe(t, ServerConfig{Replicas: 3, Shape: ShapeRanks, Model: "m1"})
	u := s.URLs()
	if len(u) != 1 {
		t.Fatalf("ranks shape has %d URLs", len(u))
	}
	code, body := mustPost(t, u[0]+"/v1/messages", map[string]any{"model": "m1", "max_tokens": 3,
		"messages": []map[string]any{{"role": "user", "content": "hello"}}}, "X-data-parallel-rank", "2")
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	mf := mustScrape(t, u[0])
	for _, name := range []string{"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
		"vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total", "vllm:prompt_tokens_total",
		"vllm:generation_tokens_total", "vllm:time_to_first_token_seconds", "vllm:cache_config_info"} {
		f := mf[name]
		if f == nil || len(f.Metric) != 3 {
			t.Fatalf("%s: want one sample per rank, got %v", name, f)
		}
		for k, m := range f.Metric {
			labels := map[string]string{}
			for _, l := range m.Label {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["engine"] != fmt.Sprint(k) {
				t.Fatalf("%s sample %d has engine=%q", name, k, labels["engine"])
			}
			if name != "vllm:cache_config_info" && labels["model_name"] != "m1" {
				t.Fatalf("%s model_name=%q", name, labels["model_name"])
			}
		}
	}
	for rank, want := range []float64{0, 0, 3} {
		if got := metricValue(t, mf, "vllm:generation_tokens_total", fmt.Sprint(rank)); got != want {
			t.Fatalf("rank %d generated %v tokens, want %v", rank, got, want)
		}
	}
	if mf["vllm:time_to_first_token_seconds"].GetType() != dto.MetricType_HISTOGRAM {
		t.Fatal("TTFT is not a histogram")
	}
	if code, _ := mustPost(t, u[0]+"/v1/messages", map[string]any{"max_tokens": 1,
		"messages": []map[string]any{{"role": "user", "content": "x"}}}, "X-data-parallel-rank", "3"); code != 400 {
		t.Fatalf("rank 3 of 3 answered %d", code)
	}
}

func TestRanksWithoutHeaderAndNoStatsSpreadOverEveryRank(t *testing.T) {
	// vLLM 0.26 behind one endpoint: four API servers, each a round robin
	// of its own; every rank gets requests, none gets most of them
	s := mustServe(t, ServerConfig{Replicas: 4, Shape: ShapeRanks, LBStats: vllmlb.None})
	for i := range 16 {
		if code, body := mustPost(t, s.URLs()[0]+"/v1/chat/completions", chatBody("p", fmt.Sprint(i), 2)); code != 200 {
			t.Fatalf("%d %s", code, body)
		}
	}
	for r := range 4 {
		if got := s.Stats(r).RequestsDone; got < 1 || got > 8 {
			t.Fatalf("rank %d served %d of 16, want 1 to 8", r, got)
		}
	}
}

func TestClientDisconnectAbortsTheRequestAndItsBlocksBecomeEvictable(t *testing.T) {
	s := mustServe(t, ServerConfig{Replicas: 1, Speed: 5})
	prompt := textOf("gone", 3000)
	body, _ := json.Marshal(map[string]any{"model": "m", "max_tokens": 20000, "stream": true,
		"messages": []map[string]any{{"role": "user", "content": prompt}}})
	conn, err := net.Dial("tcp", strings.TrimPrefix(s.URLs()[0], "http://"))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	br := bufio.NewReader(conn)
	for { // wait for the first token
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(line, "content_block_delta") {
			break
		}
	}
	if st := s.Stats(0); st.Running != 1 || st.KVUsage == 0 {
		t.Fatalf("while streaming: %+v", st)
	}
	conn.Close()
	testutil.Eventually(t, 10*time.Second, "the disconnected request to free its blocks", func() bool {
		st := s.Stats(0)
		return st.Running == 0 && st.KVUsage == 0
	})
	if st := s.Stats(0); st.RequestsDone != 1 || st.GenerationTokens >= 20000 {
		t.Fatalf("not aborted: %+v", st)
	}
	// the aborted request's blocks were freed to the evictable pool, not lost
	code, out := mustPost(t, s.URLs()[0]+"/v1/messages", map[string]any{"model": "m", "max_tokens": 1,
		"messages": []map[string]any{{"role": "user", "content": prompt}}})
	var resp struct {
		Usage struct {
			CacheRead int `json:"cache_read_input_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(out, &resp); err != nil || code != 200 || resp.Usage.CacheRead < 2900 {
		t.Fatalf("%d %s", code, out)
	}
}

func TestBadInputGetsTheAPIsOwnErrorShape(t *testing.T) {
	s := mustServe(t, ServerConfig{Replicas: 1})
	u := s.URLs()[0]
	long := textOf("long", 40000)
	cases := []struct {
		path string
		body []byte
	}{
		{"/v1/messages", []byte(`{"messages": [`)},
		{"/v1/messages", []byte(`{"max_tokens": 5}`)},
		{"/v1/messages", []byte(`{"max_tokens": 5, "messages":[{"role":"user","content":"` + long + `"}]}`)},
		{"/v1/chat/completions", []byte(`not json`)},
		{"/v1/chat/completions", []byte(`{"model":"m"}`)},
		{"/v1/chat/completions", []byte(`{"messages":[{"role":"user","content":"` + long + `"}]}`)},
		{"/v1/completions", []byte(`{"model":"m"}`)},
	}
	for _, c := range cases {
		code, out := mustPost(t, u+c.path, c.body)
		if code != 400 {
			t.Fatalf("%s %.40s: status %d", c.path, c.body, code)
		}
		var shape struct {
			Type  string `json:"type"`
			Error *struct {
				Type    string `json:"type"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal(out, &shape); err != nil || shape.Error == nil || shape.Error.Message == "" {
			t.Fatalf("%s: body %s", c.path, out)
		}
		if anthropic := c.path == "/v1/messages"; anthropic != (shape.Type == "error") || (anthropic && shape.Error.Type != "invalid_request_error") {
			t.Fatalf("%s: wrong error shape %s", c.path, out)
		}
	}
	resp, err := http.Get(u + "/v2/unknown")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Fatalf("unknown path: %d", resp.StatusCode)
	}
	for _, p := range []string{"/health", "/v1/models"} {
		resp, err := http.Get(u + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d", p, resp.StatusCode)
		}
	}
}

// sseEvents reads an SSE body into (event, data) pairs.
func sseEvents(tb testing.TB, body []byte) (names []string, data []string) {
	tb.Helper()
	for _, chunk := range strings.Split(strings.TrimSpace(string(body)), "\n\n") {
		var name, d string
		for _, line := range strings.Split(chunk, "\n") {
			if v, ok := strings.CutPrefix(line, "event: "); ok {
				name = v
			}
			if v, ok := strings.CutPrefix(line, "data: "); ok {
				d = v
			}
		}
		names, data = append(names, name), append(data, d)
	}
	return names, data
}

func TestAnthropicStreamHasTheEventSequenceAndCacheReadUsage(t *testing.T) {
	s := mustServe(t, ServerConfig{Replicas: 1})
	u := s.URLs()[0] + "/v1/messages?beta=true"
	sys := []map[string]any{{"type": "text", "text": textOf("sys", 500)}}
	msgs := []map[string]any{{"role": "user", "content": []map[string]any{{"type": "text", "text": textOf("q", 300)}}}}
	code, body := mustPost(t, u, map[string]any{"model": "m", "max_tokens": 16, "stream": true, "system": sys, "messages": msgs})
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	names, data := sseEvents(t, body)
	want := []string{"message_start", "content_block_start"}
	for range 16 {
		want = append(want, "content_block_delta")
	}
	want = append(want, "content_block_stop", "message_delta", "message_stop")
	if strings.Join(names, ",") != strings.Join(want, ",") {
		t.Fatalf("events %v", names)
	}
	var text strings.Builder
	for k, n := range names {
		if n == "content_block_delta" {
			var d struct {
				Delta struct{ Text string } `json:"delta"`
			}
			json.Unmarshal([]byte(data[k]), &d)
			text.WriteString(d.Delta.Text)
		}
	}
	// second turn: the whole first prompt and the reply are cached
	msgs = append(msgs, map[string]any{"role": "assistant", "content": text.String()},
		map[string]any{"role": "user", "content": "go on"})
	_, body = mustPost(t, u, map[string]any{"model": "m", "max_tokens": 4, "stream": true, "system": sys, "messages": msgs})
	_, data = sseEvents(t, body)
	var delta struct {
		Usage struct {
			Input     int `json:"input_tokens"`
			CacheRead int `json:"cache_read_input_tokens"`
			Output    int `json:"output_tokens"`
		} `json:"usage"`
	}
	json.Unmarshal([]byte(data[len(data)-2]), &delta)
	prompt1 := len(RenderPrompt(textOf("sys", 500), []Message{{Role: "user", Content: textOf("q", 300)}}))
	if wantCached := (prompt1 + 16 - 1) / 16 * 16; delta.Usage.CacheRead != wantCached || delta.Usage.Output != 4 {
		t.Fatalf("usage %+v, want cache_read %d", delta.Usage, wantCached)
	}
}

func TestRealAndVirtualModeGiveTheSameAnswer(t *testing.T) {
	s := mustServe(t, ServerConfig{Replicas: 1})
	sys, user := textOf("sys", 300), textOf("user", 200)
	_, body := mustPost(t, s.URLs()[0]+"/v1/messages", map[string]any{"model": "m", "max_tokens": 24,
		"system": sys, "messages": []map[string]any{{"role": "user", "content": user}}})
	var real struct {
		Content []struct{ Text string } `json:"content"`
	}
	if err := json.Unmarshal(body, &real); err != nil || len(real.Content) != 1 {
		t.Fatalf("%s", body)
	}
	v := NewVirtual(mustProfile(t, 0), 1)
	r, c := newReq(1, RenderPrompt(sys, []Message{{Role: "user", Content: user}}), 24)
	v.Submit(0, r)
	runIdle(t, v)
	if c.res.OutputText != real.Content[0].Text {
		t.Fatalf("virtual %q, real %q", c.res.OutputText, real.Content[0].Text)
	}
}
