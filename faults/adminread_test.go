package faults

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/lmwarden/lmwarden/maps"
)

// TestSessionReadsAreBounded: with 100,000 sessions in the table, any
// local user may read GET /api/v1/sessions (it shows keyed hashes only).
// A read asking for everything (limit=0, or a limit past the page's
// bound) is refused with 400; 64 reads of the largest page at once take
// a bounded share of the warden's memory; a bystander's inference request
// is served meanwhile; and the whole table can still be listed page by
// page. The sessions are written into the pinned map before the warden
// starts (it restores them), so the test runs on the kernel datapath; the
// admin API is the same on every datapath.
func TestSessionReadsAreBounded(t *testing.T) {
	if !inNetNS(t) {
		return
	}
	const sessions = 100000
	startReplicas(t, 2, replicaOpts{})
	w := startWarden(t, wardenOpts{Datapath: "msg", Replicas: 2})
	w.signal(t, 15)
	w.wait(t, 30*time.Second)
	fillSessions(t, w.opts.PinDir, sessions)
	w.restart(t)
	if n := w.models(t)[0].Sessions; n != sessions {
		t.Fatalf("%d sessions restored, want %d", n, sessions)
	}
	whole := adminStatus(t, "/api/v1/sessions?limit=0")
	huge := adminStatus(t, "/api/v1/sessions?limit=100000")

	attack := concurrentReads(t, w, "/api/v1/sessions?limit=0")
	page := concurrentReads(t, w, "/api/v1/sessions?limit=1000")
	// Every session, page by page.
	listed, pages := 0, 0
	for after := ""; ; pages++ {
		var r struct {
			Sessions []struct{} `json:"sessions"`
			Next     string     `json:"next"`
		}
		getJSON(t, "http://"+adminAddr+"/api/v1/sessions?limit=1000&after="+after, &r)
		listed += len(r.Sessions)
		if after = r.Next; after == "" || len(r.Sessions) == 0 {
			break
		}
	}
	figure(t, "%d sessions: limit=0 answered %s, limit=100000 %s; 64 reads of limit=0 at once: %v; 64 reads of the largest page (limit=1000) at once: %v; %d sessions listed in %d pages",
		sessions, whole, huge, attack, page, listed, pages)
	if whole != "400" || huge != "400" {
		t.Errorf("a read of every session was answered %s (limit=0) and %s (limit=100000), want 400", whole, huge)
	}
	if page.failed > 0 {
		t.Errorf("%d reads of the largest page failed", page.failed)
	}
	for _, r := range []readRound{attack, page} {
		if r.largest > 400<<10 {
			t.Errorf("%s: an answer of %d bytes", r.path, r.largest)
		}
		if r.peak-r.before > 96<<20 {
			t.Errorf("%s: 64 reads took the warden's resident memory from %d to %d MiB", r.path, r.before>>20, r.peak>>20)
		}
		if !r.bystander {
			t.Errorf("%s: the bystander's request was not served", r.path)
		}
	}
	if listed != sessions {
		t.Errorf("%d sessions listed page by page, want %d", listed, sessions)
	}
}

// readRound is what 64 concurrent reads of path cost the warden.
type readRound struct {
	path            string
	largest, failed int   // the largest answer (bytes); reads not answered 200 (400 included)
	before, peak    int64 // resident memory before, and its peak during the reads
	cpu             time.Duration
	bystander       bool          // a bystander's inference request, sent meanwhile, was served
	bystanderTook   time.Duration // (reported, not judged: timings vary on a shared machine)
}

func (r readRound) String() string {
	return fmt.Sprintf("each answer at most %d bytes, %d not 200, %v of CPU, peak RSS %.1f MiB over %.1f before, a bystander served %v in %v",
		r.largest, r.failed, r.cpu.Round(time.Millisecond), float64(r.peak)/(1<<20), float64(r.before)/(1<<20), r.bystander, r.bystanderTook.Round(time.Millisecond))
}

// concurrentReads sends 64 GETs of path at once, and a bystander's
// inference request meanwhile.
func concurrentReads(t *testing.T, w *warden, path string) readRound {
	r := readRound{path: path}
	resetPeakRSS(t, w.pid())
	r.before = readRSS(t, w.pid())
	cpu0 := cpuTime(t, w.pid())
	var wg sync.WaitGroup
	var mu sync.Mutex
	for range 64 {
		wg.Go(func() {
			resp, err := http.Get("http://" + adminAddr + path)
			n := 0
			if err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				n = len(b)
			}
			mu.Lock()
			defer mu.Unlock()
			r.largest = max(r.largest, n)
			if err != nil || resp.StatusCode != 200 {
				r.failed++
			}
		})
	}
	start := time.Now()
	c := dialFrom(t, "127.0.0.2")
	resp, err := c.turn(t, "bystander")
	r.bystanderTook = time.Since(start)
	r.bystander = err == nil && resp.StatusCode == 200
	c.Close()
	wg.Wait()
	r.peak = readPeakRSS(t, w.pid())
	r.cpu = cpuTime(t, w.pid()) - cpu0
	return r
}

// fillSessions writes n sessions into the pinned map of the state in dir,
// spread over two replicas, seen in the last minute.
func fillSessions(tb testing.TB, dir string, n int) {
	tb.Helper()
	m, err := ebpf.LoadPinnedMap(filepath.Join(dir, "lmw_sessions"), nil)
	if err != nil {
		tb.Fatal(err)
	}
	defer m.Close()
	now := time.Now()
	keys := make([]uint64, n)
	vals := make([]maps.Session, n)
	for i := range n {
		keys[i] = uint64(i+1) * 0x9E3779B97F4A7C15
		vals[i] = maps.Session{Replica: uint32(i % 2), LastSeenNs: uint64(now.Add(-time.Duration(i) * time.Millisecond).UnixNano())}
	}
	if _, err := m.BatchUpdate(keys, vals, nil); err != nil {
		tb.Fatal(err)
	}
}

// adminStatus is the status of a GET of the admin API.
func adminStatus(tb testing.TB, path string) string {
	tb.Helper()
	resp, err := http.Get("http://" + adminAddr + path)
	if err != nil {
		tb.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return strconv.Itoa(resp.StatusCode)
}

// resetPeakRSS starts the process's peak resident memory (VmHWM) anew.
func resetPeakRSS(tb testing.TB, pid int) {
	tb.Helper()
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		tb.Fatal(err)
	}
}

// readRSS and readPeakRSS read VmRSS and VmHWM, in bytes.
func readRSS(tb testing.TB, pid int) int64     { return procStatus(tb, pid, "VmRSS:") }
func readPeakRSS(tb testing.TB, pid int) int64 { return procStatus(tb, pid, "VmHWM:") }

func procStatus(tb testing.TB, pid int, field string) int64 {
	tb.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == field {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	tb.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// cpuTime is the process's user and system time so far.
func cpuTime(tb testing.TB, pid int) time.Duration {
	tb.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		tb.Fatal(err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / 100 // USER_HZ
}
