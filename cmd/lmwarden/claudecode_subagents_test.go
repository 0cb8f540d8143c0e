package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/lmwarden/lmwarden/agent/adminapi"
	"github.com/lmwarden/lmwarden/kernel/kerneltest"
	"github.com/lmwarden/lmwarden/maps"
	"github.com/lmwarden/lmwarden/maps/mapstest"
	"github.com/lmwarden/lmwarden/sim"
)

// The real Claude Code CLI starts subagents (its Agent tool) through the
// warden: each subagent sends its parent's session id and an agent id of
// its own, and is a conversation of its own (docs/placement.md,
// "Conversations"): all of its requests on one replica, its later turns
// from that replica's cache, and a group of them not all piled on the
// parent's replica while others are idle.

func TestClaudeCodeSubagentsAreConversationsOfTheirOwnUserDatapath(t *testing.T) {
	bin := claudeBinary(t)
	runClaudeCodeSubagents(t, bin, "", "", "user")
}

func TestClaudeCodeSubagentsAreConversationsOfTheirOwnKernelDatapath(t *testing.T) {
	bin := claudeBinary(t)
	if !mapstest.InNetNS(t) {
		return
	}
	pinDir := kerneltest.PinDir(t)
	t.Cleanup(func() {
		if err := maps.Unload(maps.Options{Dir: pinDir}); err != nil {
			t.Error(err)
		}
	})
	runClaudeCodeSubagents(t, bin, "127.0.0.1:8000", "127.0.0.1:9100", "kernel", "--pin-dir", pinDir)
}

// ccConversation is one (session, agent) conversation as the replicas saw it.
type ccConversation struct {
	agent    string // "" for the main agent
	requests []sim.RequestRecord
}

// runClaudeCodeSubagents runs the CLI through a warden in front of four
// simulated replicas. An empty front or admin takes a free loopback port
// once the replicas listen: picked before, the port a replica gets could be
// the one just freed for the frontend, and serve refuses that layout.
func runClaudeCodeSubagents(t *testing.T, bin, front, admin, datapath string, serveFlags ...string) {
	var mu sync.Mutex
	var records []sim.RequestRecord
	sv, err := sim.Serve(context.Background(), sim.ServerConfig{
		Replicas: 4, Listen: "127.0.0.1:0", Speed: 50, Model: claudeModel,
		// Replies call one of two tools 60% of the time: the Agent tool
		// is called within a few turns, and a subagent (which may start
		// subagents too) starts fewer than one on average, so the tree
		// of them stays small.
		Replies: sim.ReplyModel{Lengths: sim.LengthDist{Kind: "lognormal", A: 60, B: 0.5}, ToolUse: 0.6},
		OnRequest: func(r sim.RequestRecord) {
			mu.Lock()
			records = append(records, r)
			mu.Unlock()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sv.Close() })
	if front == "" {
		front = freeAddr(t)
	}
	if admin == "" {
		admin = freeAddr(t)
	}
	args := append([]string{"--listen", front, "--admin", admin, "--datapath", datapath}, serveFlags...)
	w := mustServe(t, append(args, replicaFlags(sv.URLs())...)...)

	work, home := t.TempDir(), t.TempDir()
	for name, text := range map[string]string{
		"main.go":   "package main\n\nfunc main() { println(\"hello\") }\n",
		"README.md": "# demo\nA tiny project for the subagents to read.\n",
	} {
		if err := os.WriteFile(filepath.Join(work, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	session := newUUID(t)
	agents := func() int {
		mu.Lock()
		defer mu.Unlock()
		seen := map[string]bool{}
		for _, r := range records {
			if a := r.Header.Get("X-Claude-Code-Agent-Id"); a != "" {
				seen[a] = true
			}
		}
		return len(seen)
	}
	// Up to 20 runs of the CLI: the replies' tool calls are drawn from
	// the prompts, which change every run, and one full run in about ten
	// drew no Agent call in 10 (the loop ends as soon as two subagents ran).
	turns := 0
	for i := range 20 {
		args := []string{"-p", "Use the Agent tool to start subagents that read main.go and README.md.",
			"--output-format", "stream-json", "--verbose", "--tools", "Agent,Read"}
		if i == 0 {
			args = append(args, "--session-id", session)
		} else {
			args = append(args, "--resume", session)
		}
		runClaude(t, bin, work, claudeCodeEnv(home, "http://"+w.frontend), args)
		turns++
		if agents() >= 2 { // a group to spread, most often
			break
		}
	}
	w.waitIdle(t)
	if agents() == 0 {
		t.Fatalf("no subagent in %d turns", turns)
	}
	mu.Lock()
	defer mu.Unlock()
	convs := map[string]*ccConversation{}
	var order []string
	for _, r := range records {
		if s := r.Header.Get("X-Claude-Code-Session-Id"); s != session {
			t.Fatalf("a request with session %q, want %q", s, session)
		}
		a := r.Header.Get("X-Claude-Code-Agent-Id")
		c := convs[a]
		if c == nil {
			c = &ccConversation{agent: a}
			convs[a] = c
			order = append(order, a)
		}
		c.requests = append(c.requests, r)
	}
	summary := ccSubagentsSummary(datapath, turns, records, convs, order)
	t.Log("\n" + summary)
	if dir := os.Getenv("LMWARDEN_TRANSCRIPT_DIR"); dir != "" {
		os.WriteFile(filepath.Join(dir, "claude-code-subagents-"+datapath+".md"), []byte(summary), 0o644)
	}
	checkCCConversations(t, convs, order)
	checkCCSessionsListing(t, w, len(convs))
}

// checkCCConversations holds every conversation to one replica, its turns
// after the first to the cache (what the turn before sent), and the subagents to more replicas than
// their parent's alone (four idle replicas: the load says spread).
func checkCCConversations(t *testing.T, convs map[string]*ccConversation, order []string) {
	t.Helper()
	parent := convs[""]
	if parent == nil {
		t.Fatal("no request of the main agent")
	}
	away := 0
	for _, a := range order {
		c := convs[a]
		home := c.requests[0].Replica
		for k, r := range c.requests {
			if r.Replica != home {
				t.Errorf("conversation %q: request %d on replica %d, its first on %d", a, k+1, r.Replica, home)
			}
			// A later turn resends the turn before it and adds what is new
			// (a tool result can be a fifth of a short subagent's prompt):
			// most of its prompt, or what the request before sent, is cached.
			if k > 0 {
				prev, cached := c.requests[k-1].PromptTokens, float64(r.CachedTokens)
				if cached < 0.8*float64(r.PromptTokens) && cached < 0.9*float64(prev) {
					t.Errorf("conversation %q: request %d had %d of %d prompt tokens cached, want at least 80%% of them or 90%% of the %d its previous request sent",
						a, k+1, r.CachedTokens, r.PromptTokens, prev)
				}
			}
		}
		if a != "" && home != parent.requests[0].Replica {
			away++
		}
	}
	if away == 0 {
		t.Errorf("every subagent on its parent's replica %d, with three replicas idle", parent.requests[0].Replica)
	}
}

// checkCCSessionsListing reads the warden's conversations: one a
// (session, agent), the subagents under a parent.
func checkCCSessionsListing(t *testing.T, w *servedWarden, want int) {
	t.Helper()
	resp, err := http.Get("http://" + w.admin + "/api/v1/sessions?limit=1000") // a page holds every conversation of this test
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var sr adminapi.SessionsResponse
	if err := json.NewDecoder(resp.Body).Decode(&sr); err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	hashes := map[string]bool{}
	for _, s := range sr.Sessions {
		kinds[s.Kind]++
		hashes[s.Hash] = true
	}
	if len(sr.Sessions) != want || kinds["session"] != 1 || kinds["subagent"] != want-1 {
		t.Errorf("the warden lists %d conversations %v, want %d: one session and its subagents", len(sr.Sessions), kinds, want)
	}
	for _, s := range sr.Sessions {
		if s.Kind == "subagent" && !hashes[s.Parent] {
			t.Errorf("subagent %s under %q, which is not listed", s.Hash, s.Parent)
		}
	}
}

func ccSubagentsSummary(datapath string, turns int, records []sim.RequestRecord, convs map[string]*ccConversation, order []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Claude Code with subagents through `lmwarden serve --datapath %s`: %d CLI turns, %d requests, %d conversations\n",
		datapath, turns, len(records), len(convs))
	fmt.Fprintf(&b, "| conversation | parent agent | requests | replicas | later turns cached |\n|---|---|---:|---|---:|\n")
	for _, a := range order {
		c := convs[a]
		reps := map[int]bool{}
		var prompt, cached int
		for k, r := range c.requests {
			reps[r.Replica] = true
			if k > 0 {
				prompt += r.PromptTokens
				cached += r.CachedTokens
			}
		}
		var rs []string
		for r := range reps {
			rs = append(rs, fmt.Sprint(r))
		}
		sort.Strings(rs)
		name, parent := a, c.requests[0].Header.Get("X-Claude-Code-Parent-Agent-Id")
		if a == "" {
			name = "main"
		} else if parent == "" {
			parent = "main"
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %s | %.0f%% |\n", name, parent, len(c.requests), strings.Join(rs, ","),
			100*float64(cached)/float64(max(prompt, 1)))
	}
	return b.String()
}
