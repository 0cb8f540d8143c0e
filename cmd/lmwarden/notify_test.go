package main

import (
	"bufio"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lmwarden/lmwarden/internal/testutil"
)

// serve tells systemd (Type=notify) it is ready only once its frontend
// listens, says STOPPING=1 when it shuts down, and with --log-format json
// writes one JSON object a line.
func TestServeNotifiesReadinessAndLogsJSON(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	frontend, admin := freeAddr(t), freeAddr(t)
	args := append([]string{"serve", "--listen", frontend, "--admin", admin, "--datapath", "user", "--log-format", "json", "--admin-token-file", filepath.Join(t.TempDir(), "admin.token")},
		replicaFlags(mustServeSim(t, 2))...)
	cmd := exec.Command(mustServeBinary(t), args...)
	cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+sock)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		exited <- cmd.Wait()
	}()
	defer func() {
		cmd.Process.Kill()
		<-exited
	}()

	read := func() string {
		t.Helper()
		buf := make([]byte, 4096)
		conn.SetReadDeadline(time.Now().Add(20 * time.Second))
		n, err := conn.Read(buf)
		if err != nil {
			t.Fatalf("no sd_notify message: %v", err)
		}
		return string(buf[:n])
	}
	msg := read()
	if !strings.HasPrefix(msg, "READY=1\n") || !strings.Contains(msg, "STATUS=serving 1 model(s), datapath user") {
		t.Fatalf("first message %q", msg)
	}
	// Ready means listening: the frontend and the admin API answer now.
	c, err := net.Dial("tcp", frontend)
	if err != nil {
		t.Fatalf("READY=1 sent but the frontend refuses: %v", err)
	}
	c.Close()
	resp, err := http.Get("http://" + admin + "/healthz")
	if err != nil {
		t.Fatalf("READY=1 sent but /healthz fails: %v", err)
	}
	resp.Body.Close()
	testutil.Eventually(t, 10*time.Second, "/readyz 200", func() bool {
		resp, err := http.Get("http://" + admin + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if msg := read(); !strings.HasPrefix(msg, "STOPPING=1\n") {
		t.Fatalf("on SIGTERM: %q", msg)
	}
	n := 0
	for line := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("--log-format json wrote %q: %v", line, err)
		}
		if rec["msg"] == nil || rec["level"] == nil || rec["time"] == nil {
			t.Errorf("log record without msg, level or time: %q", line)
		}
		n++
	}
	if err := <-exited; err != nil {
		t.Fatalf("exit after SIGTERM: %v", err)
	}
	exited <- nil
	if n < 3 {
		t.Errorf("only %d log lines", n)
	}
}
