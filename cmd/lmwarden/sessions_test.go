package main

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/lmwarden/agent/adminapi"
	"github.com/lmwarden/lmwarden/agent/placement"
	"github.com/lmwarden/lmwarden/bpf"
)

func TestSessionsPrintsHashesNotIDs(t *testing.T) {
	w := mustAdminWarden(t)
	var out bytes.Buffer
	if err := runSessions([]string{"--admin", w.AdminAddr()}, &out); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	hash := fmt.Sprintf("%016x", w.Models()[0].HashSession("cli-session"))
	if !strings.Contains(text, hash) || strings.Contains(text, "cli-session") {
		t.Errorf("sessions output:\n%s", text)
	}
	if !strings.Contains(text, "SESSION-HASH") || !strings.Contains(text, "1 of 1 live sessions") {
		t.Errorf("sessions output:\n%s", text)
	}
	if err := runSessions([]string{"--admin", w.AdminAddr(), "--model", "nope"}, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("unknown model: %v", err)
	}
	if err := runSessions([]string{"--limit", "-1"}, &bytes.Buffer{}); !errors.Is(err, errUsage) {
		t.Errorf("bad limit: %v", err)
	}
}

// The pinned map records a conversation's kind by the placement's
// numbers (bpf/lmwarden.h's enum conversation_kind says so).
func TestConversationKindsAreTheMapsNumbers(t *testing.T) {
	for _, c := range []struct {
		kind placement.ConversationKind
		bpf  bpf.LmwardenConversationKind
	}{
		{placement.ConvSession, bpf.LmwardenConversationKindCONV_SESSION},
		{placement.ConvSubagent, bpf.LmwardenConversationKindCONV_SUBAGENT},
		{placement.ConvBody, bpf.LmwardenConversationKindCONV_BODY},
	} {
		if uint32(c.kind) != uint32(c.bpf) {
			t.Errorf("%v is %d, the map's %d", c.kind, c.kind, c.bpf)
		}
		if got := conversationKindName(uint32(c.bpf)); got != c.kind.String() {
			t.Errorf("map kind %d reads as %q", c.bpf, got)
		}
	}
	if got := conversationKindName(0); got != "session" {
		t.Errorf("an entry written before kinds reads as %q", got)
	}
}

func TestSessionsListsSubagentsUnderTheirParent(t *testing.T) {
	at := time.Unix(1_700_000_000, 0)
	resp := adminapi.SessionsResponse{Total: 4, Sessions: []adminapi.SessionInfo{
		{Model: "m", Hash: "00000000000000a2", Kind: "subagent", Parent: "00000000000000a1", LastSeen: at},
		{Model: "m", Hash: "00000000000000b0", Kind: "session", LastSeen: at},
		{Model: "m", Hash: "00000000000000a1", Kind: "subagent", Parent: "00000000000000a0", LastSeen: at},
		{Model: "m", Hash: "00000000000000a0", Kind: "session", LastSeen: at},
	}}
	var out bytes.Buffer
	printSessions(&out, resp, at)
	var order []string
	for _, line := range strings.Split(out.String(), "\n")[1:5] {
		order = append(order, strings.Fields(line)[1:3]...)
	}
	want := []string{"00000000000000b0", "session", "00000000000000a0", "session", "└", "00000000000000a1", "└", "00000000000000a2"}
	if strings.Join(order, " ") != strings.Join(want, " ") {
		t.Errorf("order %v, want %v:\n%s", order, want, out.String())
	}
	if !strings.Contains(out.String(), "4 of 4 live sessions (conversations: 2 main, 2 subagents, 0 keyed by the body)") {
		t.Errorf("count line:\n%s", out.String())
	}
}
