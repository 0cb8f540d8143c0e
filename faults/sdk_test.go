package faults

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lmwarden/lmwarden/internal/testutil"
)

// clientsDir holds the official SDKs (scripts/deps.sh installs them).
const clientsDir = "../scripts/clients"

// sdkOutcome is what scripts/clients/warden_cut.mjs saw.
type sdkOutcome struct {
	API        string `json:"api"`
	Events     int    `json:"events"`
	ErrorClass string `json:"error_class"`
	APIError   bool   `json:"api_error"`
	Message    string `json:"message"`
	Finished   bool   `json:"finished"`
}

// TestCutStreamRaisesTheSDKsError: the official SDKs (Anthropic, OpenAI),
// unmodified, stream a long reply through the warden; the only replica is
// killed mid-stream. Each SDK must raise its own APIError with the
// warden's message (the API's error event), on every datapath.
func TestCutStreamRaisesTheSDKsError(t *testing.T) {
	node, err := exec.LookPath("node")
	_, modErr := os.Stat(filepath.Join(clientsDir, "node_modules", "@anthropic-ai", "sdk"))
	_, oaErr := os.Stat(filepath.Join(clientsDir, "node_modules", "openai"))
	if err != nil || modErr != nil || oaErr != nil {
		if os.Getenv("LMWARDEN_REQUIRE_BPF") == "1" || os.Getenv("CI") == "true" {
			t.Fatalf("node or the SDKs missing in %s (run scripts/deps.sh): %v %v %v", clientsDir, err, modErr, oaErr)
		}
		t.Skip("node or the SDKs missing; run scripts/deps.sh")
	}
	for _, dp := range datapaths {
		t.Run(dp, func(t *testing.T) {
			if !inNetNS(t) {
				return
			}
			rep := startReplica(t, 0, replicaOpts{Speed: 20, ReplyTokens: 20000})
			w := startWarden(t, wardenOpts{Datapath: dp, Replicas: 1})
			for i, api := range []string{"anthropic", "openai"} {
				if i > 0 {
					// The replica again, healthy again in the warden's eyes.
					rep.wait(t, 10*time.Second)
					rep = startReplica(t, 0, replicaOpts{Speed: 20, ReplyTokens: 20000})
					testutil.Eventually(t, 20*time.Second, "the replica healthy again", func() bool {
						return w.models(t)[0].Replicas[0].Healthy
					})
				}
				got := cutUnderSDK(t, node, api, rep)
				figure(t, "%s SDK, replica killed mid-stream after %d text events: %s %q (APIError %v)",
					api, got.Events, got.ErrorClass, got.Message, got.APIError)
				if got.Finished || !got.APIError || !strings.Contains(got.Message, "lmwarden") || got.Events == 0 {
					t.Errorf("%s: %+v; want the SDK's APIError with the warden's message after some text", api, got)
				}
			}
		})
	}
}

// cutUnderSDK runs warden_cut.mjs against the warden, kills rep once the
// stream has begun, and returns what the SDK saw.
func cutUnderSDK(t *testing.T, node, api string, rep *proc) sdkOutcome {
	t.Helper()
	cmd := exec.Command(node, "warden_cut.mjs", "http://"+frontend, api)
	cmd.Dir = clientsDir
	var stderr testutil.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := make(chan string, 4)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	next := func(what string) string {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("%s: the script ended before %s: %s", api, what, stderr.String())
			}
			return l
		case <-time.After(60 * time.Second):
			t.Fatalf("%s: no %s within 60 s: %s", api, what, stderr.String())
		}
		return ""
	}
	if l := next("streaming"); l != "streaming" {
		t.Fatalf("%s: %q, want streaming", api, l)
	}
	rep.signal(t, syscall.SIGKILL)
	var got sdkOutcome
	if err := json.Unmarshal([]byte(next("its outcome")), &got); err != nil {
		t.Fatalf("%s: %v (%s)", api, err, stderr.String())
	}
	cmd.Wait()
	return got
}
