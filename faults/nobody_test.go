package faults

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lmwarden/lmwarden/internal/testutil"
)

// The unprivileged neighbour: helpers that run a step of a test as the
// user nobody, through setpriv(1) (util-linux, on every Debian host).

// nobodyUID and nobodyGID are Debian's nobody and nogroup.
const (
	nobodyUID = 65534
	nobodyGID = 65534
)

// asNobody is a command that runs name args as nobody.
func asNobody(name string, args ...string) *exec.Cmd {
	all := append([]string{"--reuid", fmt.Sprint(nobodyUID), "--regid", fmt.Sprint(nobodyGID), "--clear-groups", "--", name}, args...)
	return exec.Command("setpriv", all...)
}

// helperEnv makes the test binary run one helper step instead of its tests
// (see TestMain): the step, then its arguments.
const helperEnv = "LMWARDEN_FAULTS_HELPER"

// nobodyHTTP sends one admin request as nobody (this test binary again,
// under setpriv) and returns the status it got ("error: ..." if none).
func nobodyHTTP(tb testing.TB, method, url, body, host string) string {
	tb.Helper()
	cmd := asNobody(nobodyCopy(tb), "-test.run", "^$")
	cmd.Env = append(os.Environ(), helperEnv+"=http", "LMWARDEN_FAULTS_ARGS="+strings.Join([]string{method, url, body, host}, "\x1f"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		tb.Fatalf("as nobody: %v: %s", err, out)
	}
	return strings.TrimSpace(string(out))
}

// nobodyCopy is a copy of this test binary that nobody may run (go test
// keeps its own in a private directory), removed when the test ends.
func nobodyCopy(tb testing.TB) string {
	tb.Helper()
	dir, err := os.MkdirTemp("", "lmwarden-faults-nobody-")
	if err == nil {
		err = os.Chmod(dir, 0o755)
	}
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	dst := filepath.Join(dir, "faults.test")
	b, err := os.ReadFile(os.Args[0])
	if err == nil {
		err = os.WriteFile(dst, b, 0o755)
	}
	if err != nil {
		tb.Fatal(err)
	}
	return dst
}

// floodHelper starts a process (this test binary, as root) that opens n
// idle connections to the frontend from src and holds them until the
// test ends; it returns how many it opened.
func floodHelper(tb testing.TB, src string, n int) int {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run", "^$")
	cmd.Env = append(os.Environ(), helperEnv+"=flood", "LMWARDEN_FAULTS_ARGS="+src+"\x1f"+strconv.Itoa(n))
	out := testutil.StartChild(tb, cmd) // it holds the connections until the test ends
	var opened int
	if _, err := fmt.Fscanf(out, "opened %d\n", &opened); err != nil {
		tb.Fatalf("flood helper: %v", err)
	}
	return opened
}

// runHelper runs the step helperEnv names, if any, and reports whether it
// did (TestMain then exits).
func runHelper() bool {
	switch os.Getenv(helperEnv) {
	case "flood":
		a := strings.Split(os.Getenv("LMWARDEN_FAULTS_ARGS"), "\x1f")
		n, _ := strconv.Atoi(a[1])
		var lim syscall.Rlimit
		syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
		lim.Cur = lim.Max
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
		d := net.Dialer{Timeout: 2 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(a[0])}}
		var conns []net.Conn
		for range n {
			c, err := d.Dial("tcp", frontend)
			if err != nil {
				continue
			}
			conns = append(conns, c)
		}
		fmt.Println("opened", len(conns))
		io.Copy(io.Discard, os.Stdin) // hold them until the test lets go
		return true
	case "http":
		a := strings.Split(os.Getenv("LMWARDEN_FAULTS_ARGS"), "\x1f")
		req, err := http.NewRequest(a[0], a[1], strings.NewReader(a[2]))
		if err != nil {
			fmt.Println("error:", err)
			return true
		}
		if a[3] != "" {
			req.Host = a[3]
		}
		resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
		if err != nil {
			fmt.Println("error:", err)
			return true
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		fmt.Println(resp.StatusCode)
		return true
	}
	return false
}
