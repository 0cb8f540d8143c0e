package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lmwarden/lmwarden/kernel/kerneltest"
	"github.com/lmwarden/lmwarden/maps"
	"github.com/lmwarden/lmwarden/maps/mapstest"
	"github.com/lmwarden/lmwarden/sim"
)

// The real Claude Code CLI (the pinned npm package scripts/deps.sh installs
// into scripts/clients) runs a resumed session with tool use through
// `lmwarden serve` in front of simulated replicas, configured as
// docs/claude-code.md tells a user to configure it.

// claudeModel is the served model id the session asks for.
const claudeModel = "qwen3-4b"

// claudeCodeEnv is the environment docs/claude-code.md documents, with no
// other variable of the test's own environment but PATH: a fresh home, the
// warden as the API, the served model for every model role, output and
// context limits that fit the replica, and no outbound traffic.
func claudeCodeEnv(home, base string) []string {
	return []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + home,
		"ANTHROPIC_BASE_URL=" + base,
		"ANTHROPIC_API_KEY=sk-lmwarden-test",
		"ANTHROPIC_MODEL=" + claudeModel,
		"ANTHROPIC_DEFAULT_OPUS_MODEL=" + claudeModel,
		"ANTHROPIC_DEFAULT_SONNET_MODEL=" + claudeModel,
		"ANTHROPIC_DEFAULT_HAIKU_MODEL=" + claudeModel,
		"CLAUDE_CODE_SUBAGENT_MODEL=" + claudeModel,
		"CLAUDE_CODE_MAX_OUTPUT_TOKENS=4096",
		"CLAUDE_CODE_MAX_CONTEXT_TOKENS=32768",
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
		"DISABLE_TELEMETRY=1",
		"DISABLE_ERROR_REPORTING=1",
		"DISABLE_AUTOUPDATER=1",
		"CLAUDE_CODE_MAX_TURNS=20",
	}
}

// claudeBinary is the CLI scripts/deps.sh installed, or a skip (a failure
// under CI=true, where deps.sh must have run).
func claudeBinary(t *testing.T) string {
	t.Helper()
	bin, err := filepath.Abs(filepath.Join("..", "..", "scripts", "clients", "node_modules", ".bin", "claude"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(bin); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("the Claude Code CLI is not installed (%v); scripts/deps.sh installs it", err)
		}
		t.Skipf("the Claude Code CLI is not installed: run `make deps` (scripts/deps.sh)")
	}
	return bin
}

func TestClaudeCodeSessionStaysOnOneReplicaUserDatapath(t *testing.T) {
	bin := claudeBinary(t)
	runClaudeCodeSession(t, bin, freeAddr(t), freeAddr(t), "user")
}

func TestClaudeCodeSessionStaysOnOneReplicaKernelDatapath(t *testing.T) {
	bin := claudeBinary(t)
	if !mapstest.InNetNS(t) {
		return
	}
	// pinned under a directory of its own: bpffs is not per namespace, and
	// the default directory belongs to a real warden (or another suite)
	pinDir := kerneltest.PinDir(t)
	t.Cleanup(func() {
		if err := maps.Unload(maps.Options{Dir: pinDir}); err != nil {
			t.Error(err)
		}
	})
	runClaudeCodeSession(t, bin, "127.0.0.1:8000", "127.0.0.1:9100", "kernel", "--pin-dir", pinDir)
}

// cliTurn is what one `claude -p` run reported (stream-json).
type cliTurn struct {
	toolUses    int
	firstPrompt int // the first request's prompt (message_start input_tokens)
	input       int // result usage: prompt tokens not read from the cache
	cacheRead   int
	numTurns    int
}

func runClaudeCodeSession(t *testing.T, bin, front, admin, datapath string, serveFlags ...string) {
	var mu sync.Mutex
	var records []sim.RequestRecord
	sv, err := sim.Serve(context.Background(), sim.ServerConfig{
		Replicas: 4, Listen: "127.0.0.1:0", Speed: 50, Model: claudeModel,
		Replies: sim.ReplyModel{Lengths: sim.LengthDist{Kind: "lognormal", A: 60, B: 0.5}, ToolUse: 0.7},
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
	args := append([]string{"--listen", front, "--admin", admin, "--datapath", datapath}, serveFlags...)
	w := mustServe(t, append(args, replicaFlags(sv.URLs())...)...)

	work, home := t.TempDir(), t.TempDir()
	for name, text := range map[string]string{
		"main.go":   "package main\n\nfunc main() { println(\"hello\") }\n",
		"README.md": "# demo\nA tiny project for the session to read.\n",
		"notes.txt": "todo: handle errors\n",
	} {
		if err := os.WriteFile(filepath.Join(work, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	session := newUUID(t)
	prompts := []string{
		"Read main.go and README.md and tell me what this project does.",
		"Find every TODO in this directory.",
		"Which file would you change to print a different greeting?",
		"Summarize what we found so far.",
		"List the Go files again.",
		"Anything else worth checking?",
		"Look at notes.txt once more.",
		"Wrap up.",
	}
	var turns []cliTurn
	tools := 0
	for i, prompt := range prompts {
		args := []string{"-p", prompt, "--output-format", "stream-json", "--verbose", "--tools", "Read,Glob,Grep"}
		if i == 0 {
			args = append(args, "--session-id", session)
		} else {
			args = append(args, "--resume", session)
		}
		turn := runClaude(t, bin, work, claudeCodeEnv(home, "http://"+w.frontend), args)
		turns = append(turns, turn)
		tools += turn.toolUses
		if i >= 3 && tools > 0 { // at least 3 resumed turns, and tool use seen
			break
		}
	}
	w.waitIdle(t)

	mu.Lock()
	defer mu.Unlock()
	if tools == 0 {
		t.Fatalf("no tool use in %d turns", len(turns))
	}
	var summary strings.Builder
	fmt.Fprintf(&summary, "Claude Code through `lmwarden serve --datapath %s`: %d turns (%d resumed), %d requests, %d tool calls\n",
		datapath, len(turns), len(turns)-1, len(records), tools)
	fmt.Fprintf(&summary, "| request | replica | prompt | cached | share | output | stop |\n|---:|---:|---:|---:|---:|---:|---|\n")
	replica := -1
	for k, r := range records {
		share := float64(r.CachedTokens) / float64(max(r.PromptTokens, 1))
		stop := r.StopReason
		if r.ToolCall != "" {
			stop += " (" + r.ToolCall + ")"
		}
		fmt.Fprintf(&summary, "| %d | %d | %d | %d | %.0f%% | %d | %s |\n", k+1, r.Replica, r.PromptTokens, r.CachedTokens, 100*share, r.OutputTokens, stop)
		if r.Model != claudeModel {
			t.Errorf("request %d asked for model %q: the documented settings must name the served model for every role", k+1, r.Model)
		}
		if replica < 0 {
			replica = r.Replica
		} else if r.Replica != replica {
			t.Errorf("request %d went to replica %d, the session's earlier requests to %d", k+1, r.Replica, replica)
		}
		if k > 0 && share < 0.8 {
			t.Errorf("request %d: %d of %d prompt tokens cached (%.0f%%), want at least 80%%", k+1, r.CachedTokens, r.PromptTokens, 100*share)
		}
	}
	// what the CLI received: every turn after the first, and the first but
	// for its cold first request
	var input, cached int
	for k, turn := range turns {
		input += turn.input
		cached += turn.cacheRead
		if k > 0 && float64(turn.cacheRead) < 0.8*float64(turn.input+turn.cacheRead) {
			t.Errorf("turn %d: the CLI was told %d of %d prompt tokens were cached", k+1, turn.cacheRead, turn.input+turn.cacheRead)
		}
	}
	if later := input + cached - turns[0].firstPrompt; float64(cached) < 0.8*float64(later) {
		t.Errorf("the CLI was told %d of %d prompt tokens after the first request were cached", cached, later)
	}
	fmt.Fprintf(&summary, "CLI usage over the session: %d prompt tokens, %d read from the cache (%.0f%% of those after the first request)\n",
		input+cached, cached, 100*float64(cached)/float64(max(input+cached-turns[0].firstPrompt, 1)))
	t.Log("\n" + summary.String())
	if dir := os.Getenv("LMWARDEN_TRANSCRIPT_DIR"); dir != "" {
		os.WriteFile(filepath.Join(dir, "claude-code-"+datapath+".md"), []byte(summary.String()), 0o644)
	}

	if got := sessionReplicas(t, w); len(got) != 1 {
		t.Errorf("the warden knows %d sessions, want the one", len(got))
	} else {
		for _, r := range got {
			if r != replica {
				t.Errorf("the warden pinned the session to replica %d, the requests went to %d", r, replica)
			}
		}
	}
	if m := w.models(t)[0]; m.StickyShare != 1 {
		t.Errorf("sticky share %v, want 1", m.StickyShare)
	}
}

// runClaude runs one `claude -p` turn and reads its stream-json output; any
// exit status but 0, or an error result, fails the test.
func runClaude(t *testing.T, bin, dir string, env, args []string) cliTurn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir, cmd.Env = dir, env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	fail := func(why string) {
		t.Helper()
		t.Fatalf("claude %s: %s\nstderr:\n%s\nstdout:\n%s", strings.Join(args, " "), why, stderr.String(), tail(stdout.String(), 4000))
	}
	var turn cliTurn
	var result bool
	sc := bufio.NewScanner(&stdout)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var ev struct {
			Type    string `json:"type"`
			Subtype string `json:"subtype"`
			IsError bool   `json:"is_error"`
			Result  string `json:"result"`
			Turns   int    `json:"num_turns"`
			Message struct {
				Content []struct {
					Type string `json:"type"`
				} `json:"content"`
				Usage struct {
					Input int `json:"input_tokens"`
				} `json:"usage"`
			} `json:"message"`
			Usage struct {
				Input     int `json:"input_tokens"`
				CacheRead int `json:"cache_read_input_tokens"`
			} `json:"usage"`
		}
		if json.Unmarshal(sc.Bytes(), &ev) != nil {
			continue
		}
		switch ev.Type {
		case "assistant":
			if turn.firstPrompt == 0 {
				turn.firstPrompt = ev.Message.Usage.Input
			}
			for _, b := range ev.Message.Content {
				if b.Type == "tool_use" {
					turn.toolUses++
				}
			}
		case "result":
			result = true
			// The simulated model calls a tool in most replies, so a run
			// of tool calls can reach CLAUDE_CODE_MAX_TURNS: the CLI
			// stops there (and exits 1), every request served.
			if ev.Subtype == "error_max_turns" {
				runErr = nil
			} else if ev.IsError || ev.Subtype != "success" {
				fail(fmt.Sprintf("result %s: %s", ev.Subtype, ev.Result))
			}
			turn.input, turn.cacheRead, turn.numTurns = ev.Usage.Input, ev.Usage.CacheRead, ev.Turns
		}
	}
	if runErr != nil {
		fail(runErr.Error())
	}
	if !result {
		fail("no result event")
	}
	return turn
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

func newUUID(t *testing.T) string {
	var u [16]byte
	if _, err := rand.Read(u[:]); err != nil {
		t.Fatal(err)
	}
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}
