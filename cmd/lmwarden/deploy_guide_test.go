package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/lmwarden/maps/mapstest"
)

// docs/deploy.md's blocks marked <!-- deploy-test --> are run as written,
// in order, by one bash in a network namespace of its own (its ports are
// the guide's: 8000, 8101-8104, 9100). `vllm serve` is the simulator with
// the same ports and shape; `lmwarden` is the binary under test, its
// kernel datapath pinned under a temporary bpffs directory instead of
// /sys/fs/bpf/lmwarden. A command that fails fails the test (set -e,
// curl -f).
func TestDeployGuideRunsAsWritten(t *testing.T) {
	mapstest.RequireBPF(t)
	for _, tool := range []string{"bash", "curl", "unshare", "ip"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s: %v (scripts/deps.sh installs what is missing)", tool, err)
		}
	}
	blocks := guideBlocks(t, "../../docs/deploy.md")
	if len(blocks) < 5 {
		t.Fatalf("only %d tested blocks in docs/deploy.md", len(blocks))
	}
	real := mustServeBinary(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	work := filepath.Join(dir, "work")
	for _, d := range []string{bin, work} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	pin, err := os.MkdirTemp("/sys/fs/bpf", "lmwarden-guide-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if out, err := exec.Command(real, "unload", "--dir", pin).CombinedOutput(); err != nil && !bytes.Contains(out, []byte("no pinned state")) {
			t.Logf("unload %s: %v %s", pin, err, out)
		}
		os.RemoveAll(pin)
	})
	writeExec(t, filepath.Join(bin, "lmwarden"), fmt.Sprintf(`#!/bin/sh
# the binary under test, its pinned state in a test directory
case "$1" in
  serve) shift; exec %[1]q serve --pin-dir %[2]q "$@" ;;
  unload) shift; exec %[1]q unload --dir %[2]q "$@" ;;
esac
exec %[1]q "$@"
`, real, pin))
	writeExec(t, filepath.Join(bin, "vllm"), fmt.Sprintf(`#!/bin/bash
# stand-in for vllm serve: the simulator, same port and shape
[ "$1" = serve ] || { echo "vllm stand-in: only serve" >&2; exit 2; }
shift; name=$1; shift
host=0.0.0.0 port=8000 size=1 rank=
while [ $# -gt 0 ]; do
  case "$1" in
    --port) port=$2; shift ;;
    --host) host=$2; shift ;;
    --data-parallel-size) size=$2; shift ;;
    --data-parallel-rank) rank=$2; shift ;;
    --served-model-name) name=$2; shift ;;
    --enable-prompt-tokens-details) ;;
    *) echo "vllm stand-in: unknown flag $1" >&2; exit 2 ;;
  esac
  shift
done
if [ -n "$rank" ]; then
  exec %[1]q sim --replicas 1 --listen "$host:$port" --model "$name" --speed 50
fi
exec %[1]q sim --shape ranks --replicas "$size" --listen "$host:$port" --model "$name" --speed 50
`, real))

	script := "set -euo pipefail\nip link set lo up\ntrap 'kill $(jobs -p) 2>/dev/null; wait' EXIT\n"
	for i, b := range blocks {
		script += fmt.Sprintf("echo '### block %d (docs/deploy.md line %d)'\n%s\n", i+1, b.line, b.text)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "unshare", "--net", "bash", "-c", script)
	cmd.Dir = work
	cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		logs := ""
		for _, name := range []string{"lmwarden.log", "vllm.log", "vllm-0.log"} {
			if b, err := os.ReadFile(filepath.Join(work, name)); err == nil {
				logs += "\n--- " + name + "\n" + tail(string(b), 3000)
			}
		}
		t.Fatalf("the guide's commands failed: %v\n%s%s", err, out, logs)
	}
	t.Logf("the guide's commands:\n%s", tail(string(out), 4000))
	// What the guide says the commands show.
	for _, want := range []string{
		"lmwarden.yaml: ok: datapath auto, admin 127.0.0.1:9100, 1 model(s)",
		"qwen3-4b: frontend 127.0.0.1:8000, endpoint http://127.0.0.1:8000, 4 ranks",
		"2 of 2 live sessions (conversations: 1 main, 0 subagents, 1 keyed by the body)",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(work, "lmwarden.log")); !regexp.MustCompile(`msg="datapath: (msg|skb)"`).Match(b) {
		t.Errorf("the fail-open warden did not run the kernel datapath:\n%s", tail(string(b), 2000))
	}
}

type guideBlock struct {
	line int
	text string
}

// guideBlocks are the fenced blocks right after a <!-- deploy-test --> line.
func guideBlocks(t *testing.T, path string) []guideBlock {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []guideBlock
	sc := bufio.NewScanner(f)
	n, marked, in := 0, false, false
	var cur guideBlock
	for sc.Scan() {
		n++
		line := sc.Text()
		switch {
		case in && line == "```":
			in = false
			out = append(out, cur)
		case in:
			cur.text += line + "\n"
		case strings.TrimSpace(line) == "<!-- deploy-test -->":
			marked = true
		case marked && strings.HasPrefix(line, "```"):
			in, marked, cur = true, false, guideBlock{line: n + 1}
		case marked && strings.TrimSpace(line) != "":
			t.Fatalf("%s:%d: <!-- deploy-test --> not followed by a fenced block", path, n)
		}
	}
	return out
}

func writeExec(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o755); err != nil {
		t.Fatal(err)
	}
}

// make install stages what the guide's section 7 relies on, the unit
// passes systemd-analyze verify with the staged binary, and its sandbox
// stays where the guide says (security exposure at most 2.0; 1.8 now).
func TestMakeInstallStagesAVerifiedHardenedUnit(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make")
	}
	stage := t.TempDir()
	bin := filepath.Join(t.TempDir(), "lmwarden") // make install builds it first
	if out, err := exec.Command("make", "-s", "-C", "../..", "install", "DESTDIR="+stage, "BIN="+bin).CombinedOutput(); err != nil {
		t.Fatalf("make install: %v\n%s", err, out)
	}
	for _, f := range []string{"usr/local/bin/lmwarden", "etc/systemd/system/lmwarden.service", "etc/lmwarden/lmwarden.yaml",
		"usr/local/share/doc/lmwarden/deploy.md", "usr/local/share/doc/lmwarden/README.md",
		"usr/local/share/doc/lmwarden/LICENSE", "usr/local/share/doc/lmwarden/LICENSES/GPL-2.0-only.txt"} {
		if _, err := os.Stat(filepath.Join(stage, f)); err != nil {
			t.Errorf("not installed: %s", f)
		}
	}
	unit, err := os.ReadFile(filepath.Join(stage, "etc/systemd/system/lmwarden.service"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Type=notify", "ExecStart=/usr/local/bin/lmwarden serve --config /etc/lmwarden/lmwarden.yaml\n",
		"Documentation=file:/usr/local/share/doc/lmwarden/deploy.md"} {
		if !bytes.Contains(unit, []byte(want)) {
			t.Errorf("installed unit lacks %q", want)
		}
	}
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("no systemd-analyze")
	}
	// verify checks that ExecStart exists: point it at the staged binary.
	staged := filepath.Join(t.TempDir(), "lmwarden.service")
	os.WriteFile(staged, bytes.ReplaceAll(unit, []byte("/usr/local/bin/lmwarden"), []byte(filepath.Join(stage, "usr/local/bin/lmwarden"))), 0o644)
	if out, err := exec.Command(analyze, "verify", staged).CombinedOutput(); err != nil {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
	out, err := exec.Command(analyze, "security", "--offline=yes", staged).CombinedOutput()
	if err != nil {
		t.Fatalf("systemd-analyze security: %v\n%s", err, out)
	}
	var score float64
	for _, line := range strings.Split(string(out), "\n") {
		if i := strings.Index(line, "Overall exposure level for lmwarden.service: "); i >= 0 {
			fmt.Sscanf(line[i+len("Overall exposure level for lmwarden.service: "):], "%g", &score)
		}
	}
	if score == 0 || score > 2.0 {
		t.Errorf("exposure %.1f, want at most 2.0:\n%s", score, out)
	}
	t.Logf("systemd-analyze security: %.1f", score)
}
