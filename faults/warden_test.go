package faults

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/lmwarden/lmwarden/agent/adminapi"
	"github.com/lmwarden/lmwarden/agent/placement"
	"github.com/lmwarden/lmwarden/internal/testutil"
	"github.com/lmwarden/lmwarden/maps"
)

// The warden's addresses inside a test's namespace.
const (
	frontend  = "127.0.0.1:8000"
	adminAddr = "127.0.0.1:9100"
)

// hashKey is the session-hash key of every warden of the suite, so a test
// can tell which replica a session of its own is pinned to.
var hashKey = []byte("lmwarden-faults!")

// wardenOpts say how the warden runs.
type wardenOpts struct {
	Datapath string // user (default), msg, skb, kernel, auto
	PinDir   string // the kernel datapaths' state (default: a fresh one under /sys/fs/bpf)
	Replicas int    // replicas 0..n-1 (default 4)
	// Extra is YAML added at the top level of the configuration (daemon
	// fields); ModelExtra inside the only model.
	Extra, ModelExtra string
	Args              []string // more flags of serve
	// NoFile, if set, is the warden's descriptor limit (soft and hard),
	// which it cannot raise (it runs without CAP_SYS_RESOURCE), as under
	// a systemd unit's LimitNOFILE=.
	NoFile int
	NoWait bool // do not wait for readiness (a start that must fail)
}

// warden is a running `lmwarden serve`.
type warden struct {
	*proc
	opts   wardenOpts
	config string // the configuration file
}

// pinDir is a fresh state directory for one test, removed (unloaded) at
// its end.
func pinDir(tb testing.TB) string {
	tb.Helper()
	dir := filepath.Join("/sys/fs/bpf", fmt.Sprintf("lmwarden-faults-%d", os.Getpid()))
	tb.Cleanup(func() {
		if err := maps.Unload(maps.Options{Dir: dir}); err != nil {
			tb.Errorf("unload %s: %v", dir, err)
		}
		os.RemoveAll(dir)
	})
	return dir
}

// writeConfig writes the warden's configuration file into dir.
func writeConfig(tb testing.TB, dir string, o wardenOpts) string {
	tb.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "admin: %s\npoll_interval: 100ms\npoll_timeout: 500ms\nunhealthy_after: 3\nhash_key: %s\n", adminAddr, hex.EncodeToString(hashKey))
	if !before() {
		b.WriteString(o.Extra)
	}
	fmt.Fprintf(&b, "\nmodels:\n  - name: m\n    frontend: %s\n    replicas:\n", frontend)
	for i := range o.Replicas {
		fmt.Fprintf(&b, "      - %s\n", replicaURL(i))
	}
	modelExtra := o.ModelExtra
	if before() {
		modelExtra = ""
	}
	for _, line := range strings.Split(strings.TrimSpace(modelExtra), "\n") {
		if line != "" {
			b.WriteString("    " + line + "\n")
		}
	}
	path := filepath.Join(dir, "lmwarden.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		tb.Fatal(err)
	}
	return path
}

// startWarden runs the warden on a fresh configuration and waits until it
// is ready (GET /readyz 200).
func startWarden(tb testing.TB, o wardenOpts) *warden {
	tb.Helper()
	if o.Datapath == "" {
		o.Datapath = "user"
	}
	if o.Replicas == 0 {
		o.Replicas = 4
	}
	if o.PinDir == "" && o.Datapath != "user" {
		o.PinDir = pinDir(tb)
	}
	dir := tb.TempDir()
	w := &warden{opts: o, config: writeConfig(tb, dir, o)}
	return w.restart(tb)
}

// restart starts the warden's process again (the same configuration and
// pinned state); the previous one must have exited.
func (w *warden) restart(tb testing.TB) *warden {
	tb.Helper()
	args := []string{"serve", "--config", w.config, "--datapath", w.opts.Datapath, "--shutdown-timeout", "20s"}
	if w.opts.PinDir != "" {
		args = append(args, "--pin-dir", w.opts.PinDir)
	}
	if !strings.Contains(w.opts.Extra, "admin_token_file") {
		// The admin token in the test's own directory, not the host's /run.
		args = append(args, "--admin-token-file", filepath.Join(filepath.Dir(w.config), "admin.token"))
	}
	args = append(args, w.opts.Args...)
	if w.opts.NoFile > 0 {
		lim := fmt.Sprintf("--nofile=%d:%d", w.opts.NoFile, w.opts.NoFile)
		cmd := exec.Command("prlimit", append([]string{lim, "--", "setpriv", "--bounding-set", "-sys_resource", "--", binary(tb)}, args...)...)
		w.proc = startCmd(tb, "warden", cmd)
	} else {
		w.proc = startProc(tb, "warden", args...)
	}
	if w.opts.NoWait {
		return w
	}
	testutil.Eventually(tb, 30*time.Second, "the warden to be ready", func() bool {
		if !w.running() {
			tb.Fatalf("the warden exited: %v\n%s", w.err, w.out.String())
		}
		resp, err := http.Get("http://" + adminAddr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	return w
}

// models reads GET /api/v1/models.
func (w *warden) models(tb testing.TB) []adminapi.ModelStatus {
	tb.Helper()
	var r adminapi.ModelsResponse
	getJSON(tb, "http://"+adminAddr+"/api/v1/models", &r)
	return r.Models
}

// getJSON decodes the JSON answer of a GET.
func getJSON(tb testing.TB, url string, v any) {
	tb.Helper()
	resp, err := http.Get(url)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		tb.Fatalf("GET %s: %s: %s", url, resp.Status, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		tb.Fatalf("GET %s: %v: %s", url, err, b)
	}
}

// sessionReplica is the replica the warden pins session id to (-1: none).
func (w *warden) sessionReplica(tb testing.TB, id string) int {
	tb.Helper()
	want := fmt.Sprintf("%016x", placement.NewSessionHasher(hashKey).Hash(id))
	for after := ""; ; {
		var r adminapi.SessionsResponse
		getJSON(tb, "http://"+adminAddr+"/api/v1/sessions?limit=1000&after="+after, &r)
		for _, s := range r.Sessions {
			if s.Hash == want {
				return s.Replica
			}
		}
		if after = r.Next; after == "" {
			return -1
		}
	}
}

// metrics scrapes the warden's /metrics.
func (w *warden) metrics(tb testing.TB) map[string]*dto.MetricFamily {
	tb.Helper()
	resp, err := http.Get("http://" + adminAddr + "/metrics")
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	return fams
}

// metric sums the samples of a family whose labels include every given
// name=value pair (0 when there is none).
func metric(fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	f := fams[name]
	if f == nil {
		return 0
	}
	sum := 0.0
next:
	for _, m := range f.GetMetric() {
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, l := range m.GetLabel() {
				if l.GetName() == labels[i] && l.GetValue() == labels[i+1] {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		case m.Untyped != nil:
			sum += m.GetUntyped().GetValue()
		}
	}
	return sum
}

// procStats are what the soak compares before and after: the warden
// process's open descriptors and resident memory, its goroutines, what it
// counts in flight, and (kernel datapaths) the entries of its per-socket
// maps.
type procStats struct {
	FDs        int
	RSS        int64 // bytes
	Goroutines int
	InFlight   int
	MapEntries int
}

func (s procStats) String() string {
	return fmt.Sprintf("fds %d, RSS %.1f MiB, goroutines %d, in flight %d, map entries %d",
		s.FDs, float64(s.RSS)/(1<<20), s.Goroutines, s.InFlight, s.MapEntries)
}

// stats reads procStats.
func (w *warden) stats(tb testing.TB) procStats {
	tb.Helper()
	var s procStats
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", w.pid()))
	if err != nil {
		tb.Fatal(err)
	}
	s.FDs = len(ents)
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", w.pid()))
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			s.RSS = kb << 10
		}
	}
	fams := w.metrics(tb)
	s.Goroutines = int(metric(fams, "go_goroutines"))
	s.InFlight = int(metric(fams, "lmwarden_in_flight"))
	if w.opts.PinDir != "" {
		s.MapEntries = socketMapEntries(tb, w.opts.PinDir)
	}
	return s
}

// socketMapEntries counts the per-socket entries of the kernel state: what
// a connection leaves behind if nothing removes it.
func socketMapEntries(tb testing.TB, dir string) int {
	tb.Helper()
	n := 0
	for _, name := range []string{"lmw_sock_ctls", "lmw_sock_states", "lmw_own_conns"} {
		m, err := ebpf.LoadPinnedMap(filepath.Join(dir, name), nil)
		if err != nil {
			continue // not in this datapath's state
		}
		k, v := make([]byte, m.KeySize()), make([]byte, m.ValueSize())
		it := m.Iterate()
		for it.Next(&k, &v) {
			n++
		}
		m.Close()
	}
	return n
}
