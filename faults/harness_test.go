package faults

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lmwarden/lmwarden/internal/testutil"
	"github.com/lmwarden/lmwarden/maps/mapstest"
)

// binEnv names the lmwarden binary the suite runs. The parent test process
// builds it once and passes it to the namespaced children in this
// variable; set it by hand to run the suite against another build (the
// "before" column of docs/reliability.md was measured so).
const binEnv = "LMWARDEN_FAULTS_BIN"

var (
	buildOnce sync.Once
	buildErr  error
)

// binary returns the lmwarden binary, building it the first time.
func binary(tb testing.TB) string {
	tb.Helper()
	if b := os.Getenv(binEnv); b != "" {
		return b
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "lmwarden-faults-")
		if err == nil {
			err = os.Chmod(dir, 0o755) // the unprivileged steps run from here too
		}
		if err != nil {
			buildErr = err
			return
		}
		b := filepath.Join(dir, "lmwarden")
		out, err := exec.Command("go", "build", "-o", b, "../cmd/lmwarden").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
			return
		}
		os.Setenv(binEnv, b) // the children InNetNS starts inherit it
	})
	if buildErr != nil {
		tb.Fatal(buildErr)
	}
	return os.Getenv(binEnv)
}

func TestMain(m *testing.M) {
	if runHelper() {
		os.Exit(0)
	}
	code := m.Run()
	if b := os.Getenv(binEnv); b != "" && !mapstest.Inside() && strings.HasPrefix(b, os.TempDir()) && strings.Contains(b, "lmwarden-faults-") {
		os.RemoveAll(filepath.Dir(b))
	}
	os.Exit(code)
}

// inNetNS runs the calling test alone in a fresh network namespace (see
// mapstest.InNetNS), with the binary built first so every child reuses it.
func inNetNS(t *testing.T) bool {
	t.Helper()
	mapstest.RequireBPF(t)
	binary(t)
	return mapstest.InNetNS(t)
}

// before reports a run against an older build (LMWARDEN_FAULTS_BEFORE=1):
// the configuration leaves out the settings it does not know, so that
// the same probes measure what it does.
func before() bool { return os.Getenv("LMWARDEN_FAULTS_BEFORE") == "1" }

// soak reports the long suite (make soak).
func soak() bool { return os.Getenv("LMWARDEN_SOAK") == "1" }

// proc is one process of the suite: a replica or a warden.
type proc struct {
	name   string
	cmd    *exec.Cmd
	out    *testutil.Buffer
	exited chan struct{}
	err    error // valid once exited is closed
}

// startProc runs the lmwarden binary with args; the test's cleanup kills it
// (after a SIGCONT, in case a test stopped it) and, when the test failed,
// logs its output.
func startProc(tb testing.TB, name string, args ...string) *proc {
	tb.Helper()
	return startCmd(tb, name, exec.Command(binary(tb), args...))
}

func startCmd(tb testing.TB, name string, cmd *exec.Cmd) *proc {
	tb.Helper()
	p := &proc{name: name, cmd: cmd, out: &testutil.Buffer{}, exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	// A child the process left behind (flock's sleep) may hold its output
	// open: Wait stops copying it a second after the process exits.
	cmd.WaitDelay = time.Second
	// Its own process group, so that the cleanup ends what it started too.
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	if err := cmd.Start(); err != nil {
		tb.Fatalf("%s: %v", name, err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	tb.Cleanup(func() {
		pid := p.cmd.Process.Pid
		syscall.Kill(-pid, syscall.SIGCONT)
		syscall.Kill(-pid, syscall.SIGKILL)
		<-p.exited
		if tb.Failed() {
			tb.Logf("--- %s output:\n%s", p.name, p.out.String())
		}
	})
	return p
}

// signal sends sig to the process.
func (p *proc) signal(tb testing.TB, sig syscall.Signal) {
	tb.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		tb.Fatalf("%s: signal %v: %v", p.name, sig, err)
	}
}

// wait waits for the process to exit, at most timeout.
func (p *proc) wait(tb testing.TB, timeout time.Duration) error {
	tb.Helper()
	select {
	case <-p.exited:
		return p.err
	case <-time.After(timeout):
		tb.Fatalf("%s did not exit within %v:\n%s", p.name, timeout, p.out.String())
		return nil
	}
}

// running reports whether the process has not exited.
func (p *proc) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// pid is the process id.
func (p *proc) pid() int { return p.cmd.Process.Pid }

// replicaPort is replica i's port; every test has a namespace of its own,
// so fixed ports are free.
func replicaPort(i int) int { return 8101 + i }

// replicaURL is replica i's base URL.
func replicaURL(i int) string { return fmt.Sprintf("http://127.0.0.1:%d", replicaPort(i)) }

// replicaOpts say how the simulated replicas run.
type replicaOpts struct {
	Speed       float64 // modelled seconds a wall second (default 20)
	ReplyTokens int     // every text reply this long (default 40; max_tokens still cuts it)
}

// startReplica runs replica i as `lmwarden sim --replicas 1` in a process
// of its own, and waits until it answers.
func startReplica(tb testing.TB, i int, o replicaOpts) *proc {
	tb.Helper()
	if o.Speed == 0 {
		o.Speed = 20
	}
	if o.ReplyTokens == 0 {
		o.ReplyTokens = 40
	}
	p := startProc(tb, fmt.Sprintf("replica %d", i), "sim", "--replicas", "1",
		"--listen", fmt.Sprintf("127.0.0.1:%d", replicaPort(i)),
		"--speed", strconv.FormatFloat(o.Speed, 'f', -1, 64),
		"--reply-tokens", fmt.Sprintf("fixed:%d", o.ReplyTokens))
	testutil.Eventually(tb, 20*time.Second, p.name+" to answer", func() bool {
		resp, err := http.Get(replicaURL(i) + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	return p
}

// startReplicas starts n replicas.
func startReplicas(tb testing.TB, n int, o replicaOpts) []*proc {
	tb.Helper()
	out := make([]*proc, n)
	for i := range n {
		out[i] = startReplica(tb, i, o)
	}
	return out
}

// raiseNoFile lets the test process hold as many descriptors as the host
// allows (it opens thousands of client sockets): the kernel's nr_open with
// CAP_SYS_RESOURCE, else the hard limit. It returns the limit.
func raiseNoFile(tb testing.TB) uint64 {
	tb.Helper()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		tb.Fatal(err)
	}
	if b, err := os.ReadFile("/proc/sys/fs/nr_open"); err == nil {
		if n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil && n > lim.Max {
			if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: n, Max: n}) == nil {
				return n
			}
		}
	}
	lim.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		tb.Fatalf("RLIMIT_NOFILE: %v", err)
	}
	return lim.Max
}

// httpClient is a GET with a timeout and no connection reuse.
type httpClient struct{ timeout time.Duration }

func (h *httpClient) get(url string) (int, error) {
	c := &http.Client{Timeout: h.timeout, Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil}}
	resp, err := c.Get(url)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}
