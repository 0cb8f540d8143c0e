package l7

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/lmwarden/agent/config"
	"github.com/lmwarden/lmwarden/internal/testutil"
	"github.com/lmwarden/lmwarden/sim"
)

// logLines decodes the JSON lines written to buf so far.
func logLines(tb testing.TB, buf *testutil.Buffer) ([]map[string]any, string) {
	tb.Helper()
	text := buf.String()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			tb.Fatalf("access log line %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out, text
}

// TestAccessLogWritesOneLinePerRequest: a session's turn, a subagent's,
// a request without a session header, a 503 with no healthy replica and
// a malformed head each get one line with the documented fields; the ids
// appear only as keyed hashes and no prompt text appears at all.
func TestAccessLogWritesOneLinePerRequest(t *testing.T) {
	sv := mustSim(t, 1, sim.ShapePorts)
	mc := modelConfig(sv.URLs()...)
	mc.AgentHeaders = config.DefaultAgentHeaders
	mc.BodyKey = true
	m := mustModel(t, mc)
	var buf testutil.Buffer
	access := slog.New(slog.NewJSONHandler(&buf, nil))
	_, addr := mustShim(t, m, Options{AccessLog: access})

	const secretSession, secretAgent, prompt = "session-raw-id-1234", "agent-raw-id-5678", "the prompt text must never be logged"
	c := mustDial(t, addr)
	c.send(t, messagesRequest(secretSession, []string{prompt}, ""))
	if resp, _ := c.response(t); resp.StatusCode != 200 {
		t.Fatalf("session turn: %s", resp.Status)
	}
	c.send(t, messagesRequest(secretSession, []string{prompt}, "X-Claude-Code-Agent-Id: "+secretAgent+"\r\n"))
	if resp, _ := c.response(t); resp.StatusCode != 200 {
		t.Fatalf("subagent turn: %s", resp.Status)
	}
	c.send(t, messagesRequest("", []string{prompt}, ""))
	if resp, _ := c.response(t); resp.StatusCode != 200 {
		t.Fatalf("no session header: %s", resp.Status)
	}
	m.SetHealthy(0, false)
	c.send(t, messagesRequest(secretSession, []string{prompt}, ""))
	if resp, _ := c.response(t); resp.StatusCode != 503 {
		t.Fatalf("no healthy replica: %s", resp.Status)
	}
	testutil.Eventually(t, 10*time.Second, "four access lines", func() bool {
		lines, _ := logLines(t, &buf)
		return len(lines) >= 4
	})
	bad := mustDial(t, addr)
	bad.send(t, "GET / HTTP/1.1\r\nHost x\r\n\r\n")
	if resp, _ := bad.response(t); resp.StatusCode != 400 {
		t.Fatalf("malformed head: %s", resp.Status)
	}

	var lines []map[string]any
	var text string
	testutil.Eventually(t, 10*time.Second, "five access lines", func() bool {
		lines, text = logLines(t, &buf)
		return len(lines) >= 5
	})
	if len(lines) != 5 {
		t.Fatalf("%d lines, want 5:\n%s", len(lines), text)
	}
	for _, secret := range []string{secretSession, secretAgent, prompt} {
		if strings.Contains(text, secret) {
			t.Errorf("the access log holds %q:\n%s", secret, text)
		}
	}
	fields := []string{"time", "level", "msg", "model", "client", "method", "path", "conversation", "session", "agent",
		"replica", "kind", "status", "ttfb", "duration", "parked", "bytes_in", "bytes_out"}
	session := hex16(m.HashSession(secretSession))
	want := []map[string]any{
		{"method": "POST", "path": "/v1/messages", "conversation": "session", "session": session, "agent": "-", "replica": 0.0, "kind": "new", "status": 200.0},
		{"conversation": "subagent", "agent": hex16(m.HashSession(secretAgent)), "replica": 0.0, "kind": "new", "status": 200.0},
		{"conversation": "body", "replica": 0.0, "status": 200.0},
		{"conversation": "session", "session": "-", "replica": -1.0, "kind": "-", "status": 503.0, "ttfb": -1.0, "bytes_out": 0.0},
		{"method": "-", "path": "-", "status": 400.0, "replica": -1.0},
	}
	for i, line := range lines {
		for _, f := range fields {
			if _, ok := line[f]; !ok {
				t.Errorf("line %d lacks %q: %v", i, f, line)
			}
		}
		if line["level"] != "INFO" || line["msg"] != "access" || line["model"] != "m" || !strings.HasPrefix(line["client"].(string), "127.0.0.1:") {
			t.Errorf("line %d: %v", i, line)
		}
		for k, v := range want[i] {
			if line[k] != v {
				t.Errorf("line %d: %s = %v, want %v (%v)", i, k, line[k], v, line)
			}
		}
	}
	for i := range 3 { // the answered ones: a first byte, a duration, bytes both ways
		l := lines[i]
		if ttfb, d := l["ttfb"].(float64), l["duration"].(float64); ttfb < 0 || d < ttfb || l["bytes_in"].(float64) <= 0 || l["bytes_out"].(float64) <= 0 {
			t.Errorf("line %d: ttfb %v, duration %v, bytes %v/%v", i, l["ttfb"], l["duration"], l["bytes_in"], l["bytes_out"])
		}
	}
	if lines[0]["session"] == lines[1]["session"] {
		t.Error("a subagent is a conversation of its own: its session hash should differ from its parent's")
	}
}

// TestAccessLogIsOffWithoutALogger: no AccessLog, no line (serve
// --access-log off, access_log: false).
func TestAccessLogIsOffWithoutALogger(t *testing.T) {
	sv := mustSim(t, 1, sim.ShapePorts)
	m := mustModel(t, modelConfig(sv.URLs()...))
	var buf testutil.Buffer
	_, addr := mustShim(t, m, Options{Logger: slog.New(slog.NewJSONHandler(&buf, nil))})
	c := mustDial(t, addr)
	c.send(t, messagesRequest("s", []string{"hello"}, ""))
	if resp, _ := c.response(t); resp.StatusCode != 200 {
		t.Fatalf("%s", resp.Status)
	}
	c.Close()
	waitInFlight(t, m)
	if _, text := logLines(t, &buf); strings.Contains(text, `"msg":"access"`) {
		t.Errorf("access line without an access logger:\n%s", text)
	}
}
