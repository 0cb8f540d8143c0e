package bench

import (
	"github.com/lmwarden/lmwarden/agent/placement"
	"github.com/lmwarden/lmwarden/l7/bodykey"
	"github.com/lmwarden/lmwarden/sim"
)

// How a virtual run keys a request's conversation: as the shim would,
// from the session and agent headers the request carries, and, without a
// session header, from the start of the body the shim holds when it
// decides (the bytes that came with the head).

// heldBodyBytes is how much of a body the virtual shim holds: what a
// client that writes through a 4 KiB buffer (Go's net/http) sends in its
// first segment with a head of 512 bytes. Clients that write the whole
// request at once (Claude Code, the SDKs on Node) bring more, up to the
// shim's 8 KiB read; the virtual run assumes the least.
const heldBodyBytes = 4<<10 - 512

// keyRequest fills r's conversation key from what the request s carries.
func (w *virtualWorld) keyRequest(r *placement.Request, s *flowSend) {
	r.SessionID = s.Session
	if s.Session == "" {
		if !w.cfg.NoBodyKey {
			r.BodyStart = heldStart(s.Held, s.System, s.Messages)
		}
		return
	}
	if !w.cfg.NoAgentKey {
		r.AgentID = s.Agent
	}
}

// heldStart is the start bodykey finds in the held bytes of a request's
// body: held when the flow has them, else the body rendered as the bench
// client sends it (Anthropic shape), cut where the shim's read would be.
func heldStart(held []byte, system string, msgs []sim.Message) []byte {
	if held == nil {
		held = renderHeld(system, msgs)
	}
	start, _ := bodykey.Start(held[:min(len(held), heldBodyBytes)])
	return start
}

// renderHeld renders the first heldBodyBytes of the request body without
// the rest of the history: each message's text is cut to that length and
// messages past it are left out, which changes no byte before it.
func renderHeld(system string, msgs []sim.Message) []byte {
	cut := make([]sim.Message, 0, 2)
	n := 0
	for _, m := range msgs {
		if len(m.Content) > heldBodyBytes {
			m.Content = m.Content[:heldBodyBytes]
		}
		cut = append(cut, m)
		if n += len(m.Content); n > heldBodyBytes {
			break
		}
	}
	if len(system) > heldBodyBytes {
		system = system[:heldBodyBytes]
	}
	body, _ := requestBody(APIAnthropic, "bench", system, cut, 256)
	return body
}
