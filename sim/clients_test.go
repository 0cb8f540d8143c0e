package sim

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestOfficialClientsStreamFromTheSimUnmodified runs scripts/clients/sim_clients.mjs
// (the npm packages @anthropic-ai/sdk and openai, as scripts/deps.sh
// installs them) against a real-mode simulator.
func TestOfficialClientsStreamFromTheSimUnmodified(t *testing.T) {
	dir, err := filepath.Abs(filepath.Join("..", "scripts", "clients"))
	if err != nil {
		t.Fatal(err)
	}
	node, err := exec.LookPath("node")
	missing := ""
	switch {
	case err != nil:
		missing = "node is not installed"
	case !exists(filepath.Join(dir, "node_modules", "@anthropic-ai", "sdk")) || !exists(filepath.Join(dir, "node_modules", "openai")):
		missing = "npm packages missing in scripts/clients/node_modules"
	}
	if missing != "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s (CI=true: run scripts/deps.sh)", missing)
		}
		t.Skipf("%s: run `make deps` (scripts/deps.sh) to run the official clients", missing)
	}
	s := mustServe(t, ServerConfig{Replicas: 1, Speed: 100, Model: "qwen3-4b"})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join(dir, "sim_clients.mjs"), s.URLs()[0], "qwen3-4b")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("sim_clients.mjs: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
