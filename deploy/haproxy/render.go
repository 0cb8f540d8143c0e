package haproxy

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lmwarden/lmwarden/internal/testutil"
)

// Render and Start are for tests that run these configurations (this
// package's, and the goal test over three network namespaces in
// cmd/lmwarden).

// Target is where a rendered configuration points: the hosts (in the
// order of h1, h2, h3), the frontend, the SPOE agent.
type Target struct {
	Hosts []HostAddr
	Front string // ip:port HAProxy binds
	SPOE  string // the picker's SPOE address
	Dir   string // where the rendered files go
}

// HostAddr is one host's warden: frontend ip:port, admin API ip and port.
type HostAddr struct {
	Endpoint  string
	AdminIP   string
	AdminPort string
}

var serverLine = regexp.MustCompile(`server h([1-3]) 10\.0\.0\.[1-3]:8000 check addr 10\.0\.0\.[1-3] port 9100`)

// Render writes name (a configuration of this folder) with the example
// addresses replaced by t's, and lmwarden-spoe.conf beside it; it returns
// the rendered configuration's path.
func Render(tb testing.TB, dir, name string, t Target) string {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		tb.Fatal(err)
	}
	s := serverLine.ReplaceAllStringFunc(string(b), func(m string) string {
		i := int(m[len("server h")] - '1')
		h := t.Hosts[i]
		return fmt.Sprintf("server h%d %s check addr %s port %s", i+1, h.Endpoint, h.AdminIP, h.AdminPort)
	})
	for i, h := range t.Hosts {
		s = strings.ReplaceAll(s, fmt.Sprintf("backend host:10.0.0.%d:8000", i+1), "backend host:"+h.Endpoint)
	}
	s = strings.ReplaceAll(s, "bind :8080", "bind "+t.Front)
	s = strings.ReplaceAll(s, "server picker 127.0.0.1:9003", "server picker "+t.SPOE)
	spoe := filepath.Join(t.Dir, "lmwarden-spoe.conf")
	s = strings.ReplaceAll(s, "/etc/haproxy/lmwarden-spoe.conf", spoe)
	for _, line := range strings.Split(s, "\n") {
		if l := strings.TrimSpace(line); !strings.HasPrefix(l, "#") && strings.Contains(l, "10.0.0.") {
			tb.Fatalf("%s: an example address was left unrendered: %s", name, l)
		}
	}
	sp, err := os.ReadFile(filepath.Join(dir, "lmwarden-spoe.conf"))
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(spoe, sp, 0o644); err != nil {
		tb.Fatal(err)
	}
	out := filepath.Join(t.Dir, name)
	if err := os.WriteFile(out, []byte(s), 0o644); err != nil {
		tb.Fatal(err)
	}
	return out
}

// Start runs haproxy -db on cfg until the test ends, and waits for its
// frontend.
func Start(tb testing.TB, bin, cfg, front string) {
	tb.Helper()
	cmd := exec.Command(bin, "-db", "-f", cfg)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	tb.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		if tb.Failed() {
			tb.Logf("haproxy:\n%s", out.String())
		}
	})
	testutil.Eventually(tb, 10*time.Second, "haproxy listening on "+front, func() bool {
		select {
		case <-done:
			tb.Fatalf("haproxy exited:\n%s", out.String())
		default:
		}
		c, err := net.DialTimeout("tcp", front, 200*time.Millisecond)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
}
