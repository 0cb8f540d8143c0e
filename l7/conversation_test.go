package l7

import (
	"fmt"
	"strings"
	"testing"

	"github.com/lmwarden/lmwarden/agent/config"
	"github.com/lmwarden/lmwarden/agent/placement"
	"github.com/lmwarden/lmwarden/l7/http1"
	"github.com/lmwarden/lmwarden/sim"
)

// keySources are the defaults a model reads conversations by.
var keySources = placement.KeySources{
	SessionHeaders: config.DefaultSessionHeaders, AgentHeaders: config.DefaultAgentHeaders, BodyKey: true,
}

func mustHead(t *testing.T, raw string) (*http1.Head, []byte) {
	t.Helper()
	h, rest, err := http1.ReadHead(strings.NewReader(raw), nil)
	if err != nil {
		t.Fatal(err)
	}
	return h, rest
}

func TestRoutingKeyReadsTheAgentOnlyWithASession(t *testing.T) {
	h, rest := mustHead(t, "POST /v1/messages HTTP/1.1\r\nHost: w\r\nX-Claude-Code-Session-Id: s\r\nx-claude-code-agent-id: a1\r\n"+
		"X-Claude-Code-Parent-Agent-Id: a0\r\nContent-Length: 2\r\n\r\n{}")
	k := RoutingKeyOf(h, keySources, rest)
	if k.SessionID != "s" || k.AgentID != "a1" || k.ParentAgentID != "a0" || k.BodyStart != nil {
		t.Errorf("%+v", k)
	}
	h, rest = mustHead(t, "POST /v1/messages HTTP/1.1\r\nHost: w\r\nx-claude-code-agent-id: a1\r\nContent-Length: 2\r\n\r\n{}")
	if k := RoutingKeyOf(h, keySources, rest); k.AgentID != "" {
		t.Errorf("an agent without a session: %+v", k)
	}
	noAgents := keySources
	noAgents.AgentHeaders = nil
	h, rest = mustHead(t, "POST /v1/messages HTTP/1.1\r\nHost: w\r\nX-Claude-Code-Session-Id: s\r\nx-claude-code-agent-id: a1\r\nContent-Length: 2\r\n\r\n{}")
	if k := RoutingKeyOf(h, noAgents, rest); k.AgentID != "" {
		t.Errorf("agent_headers empty: %+v", k)
	}
}

func TestRoutingKeyReadsTheBodyStartOnlyFromTheBytesHeld(t *testing.T) {
	body := `{"messages":[{"role":"user","content":"what is in main.go?"}],"model":"m"}`
	head := fmt.Sprintf("POST /v1/messages HTTP/1.1\r\nHost: w\r\nContent-Length: %d\r\n\r\n", len(body))
	h, rest := mustHead(t, head+body)
	k := RoutingKeyOf(h, keySources, rest)
	if string(k.BodyStart) != "s\x00uwhat is in main.go?" {
		t.Errorf("start %q", k.BodyStart)
	}
	if k := RoutingKeyOf(h, keySources, rest[:30]); k.BodyStart != nil || !k.BodyShort {
		t.Errorf("30 bytes held: %+v", k)
	}
	off := keySources
	off.BodyKey = false
	if k := RoutingKeyOf(h, off, rest); k.BodyStart != nil {
		t.Errorf("body_key off: %+v", k)
	}
	// Bytes past the Content-Length are the next request's, not this body's.
	h, _ = mustHead(t, "POST /v1/messages HTTP/1.1\r\nHost: w\r\nContent-Length: 20\r\n\r\n")
	if k := RoutingKeyOf(h, keySources, []byte(body)); k.BodyStart != nil {
		t.Errorf("a start beyond the Content-Length: %+v", k)
	}
	h, _ = mustHead(t, "POST /v1/messages HTTP/1.1\r\nHost: w\r\nTransfer-Encoding: chunked\r\n\r\n")
	if k := RoutingKeyOf(h, keySources, []byte(body)); k.BodyStart != nil || k.BodyShort {
		t.Errorf("a chunked body: %+v", k)
	}
}

// Two conversations from a client that sends no session header: each
// one's turns land on one replica, keyed by its first message, on every
// datapath (the suite runs this over the kernel ones too).
func TestConversationsWithoutSessionHeaderStayOnOneReplicaEach(t *testing.T) {
	sv := mustSim(t, 4, sim.ShapePorts)
	mc := modelConfig(sv.URLs()...)
	mc.AgentHeaders, mc.BodyKey = config.DefaultAgentHeaders, true
	m := mustModel(t, mc)
	s, addr := mustShim(t, m, Options{})
	convs := map[string][]string{
		"a": {strings.Repeat("first question of a ", 100)},
		"b": {strings.Repeat("first question of b ", 100)},
	}
	for turn := range 4 {
		for _, name := range []string{"a", "b"} {
			c := mustDial(t, addr)
			c.send(t, messagesRequest("", convs[name], ""))
			resp, body := c.response(t)
			if resp.StatusCode != 200 {
				t.Fatalf("%s turn %d: status %d", name, turn, resp.StatusCode)
			}
			convs[name] = append(convs[name], fmt.Sprintf("reply of %d bytes", len(body)), fmt.Sprintf("next %d", turn))
			c.Close()
		}
	}
	waitInFlight(t, m)
	st := m.Status()
	if st.ConversationRequests["body"] != 8 || st.Conversations["body"] != 2 || st.StickyShare != 1 {
		t.Errorf("keyed %v conversations %v sticky share %v: want 8 requests of 2 conversations, each on its replica",
			st.ConversationRequests, st.Conversations, st.StickyShare)
	}
	if got := s.Stats().BodyKeys; got[bodyKeyed] != 8 {
		t.Errorf("body keys %v, want 8 keyed", got)
	}
}
