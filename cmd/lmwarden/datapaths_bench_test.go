package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lmwarden/lmwarden/internal/testutil"
	"github.com/lmwarden/lmwarden/kernel/kerneltest"
	"github.com/lmwarden/lmwarden/l7"
	"github.com/lmwarden/lmwarden/maps"
	"github.com/lmwarden/lmwarden/maps/mapstest"
)

// BenchmarkDatapaths compares, side by side in one run, what a user could
// put between agents and one vLLM replica: nothing (direct), nginx,
// HAProxy, and `lmwarden serve` with each datapath (user, skb, msg). The
// upstream is a process of its own that reads each 50 KB request body and
// streams 256 SSE events 1 ms apart (a replica's tokens); nginx, HAProxy
// and each warden run as processes of their own. Every path runs with a
// new connection per request (fresh) and with keep-alive connections,
// with 1 and with 32 streams at once. LMWARDEN_BENCH_ROUNDS (default 1)
// times b.N is the number of rounds (the count is not b.N alone: with
// -benchtime Nx, go test runs the benchmark once with b.N = 1 first); each
// round runs every path and setting in turn (so that other load on a
// shared machine spreads over all of them), perRound requests each.
//
// Reported per path and setting: time to first byte p50/p99 (from the
// request's first byte written to the response's first byte read), the
// stream's completion time, its end (from the last data to the body's
// end: the terminating chunk), and CPU per request and per GB moved, twice:
// the whole machine's (/proc/stat, everything counts, other jobs too) and
// ours (the client, the upstream, the path's own process, and the
// kernel's workers: kworker, ksoftirqd). A table of each path against
// direct closes the run. scripts/bench-datapaths.sh installs Debian's
// nginx and HAProxy when missing and runs it in a network namespace of
// its own.
func BenchmarkDatapaths(b *testing.B) {
	mapstest.RequireBPF(b)
	bin := mustServeBinary(b)
	up := startBenchUpstream(b)
	body := benchBody()
	type path struct{ name, addr string }
	var paths []path
	names := []string{"direct", "nginx", "haproxy", "user", "skb", "msg"}
	if only := os.Getenv("LMWARDEN_BENCH_PATHS"); only != "" { // for profiles: "direct,msg"
		names = strings.Split(only, ",")
	}
	for _, name := range names {
		addr, stop := startBenchPath(b, bin, name, up)
		if addr == "" {
			continue
		}
		b.Cleanup(stop)
		paths = append(paths, path{name, addr})
	}
	type key struct {
		path    string
		keep    bool
		streams int
	}
	type acc struct {
		samples       []benchSample
		moved         int64
		machine, ours float64 // CPU seconds
	}
	results := map[key]*acc{}
	var order []key
	b.ResetTimer()
	keeps, streamss := []bool{false, true}, []int{1, 32}
	switch os.Getenv("LMWARDEN_BENCH_CONNS") { // for profiles: one kind of connection
	case "fresh":
		keeps = []bool{false}
	case "keepalive":
		keeps = []bool{true}
	}
	if only := os.Getenv("LMWARDEN_BENCH_STREAMS"); only != "" { // for profiles: "1" or "32"
		streamss = nil
		for _, f := range strings.Split(only, ",") {
			if n, err := strconv.Atoi(f); err == nil && n > 0 {
				streamss = append(streamss, n)
			}
		}
	}
	rounds := b.N
	if r, err := strconv.Atoi(os.Getenv("LMWARDEN_BENCH_ROUNDS")); err == nil && r > 0 {
		rounds *= r
	}
	for range rounds {
		for _, keep := range keeps {
			for _, streams := range streamss {
				for _, p := range paths {
					k := key{p.name, keep, streams}
					a := results[k]
					if a == nil {
						a = &acc{}
						results[k] = a
						order = append(order, k)
					}
					samples, machine, ours := runBenchRound(b, p.addr, keep, streams, perRound(streams), body)
					a.machine += machine
					a.ours += ours
					a.samples = append(a.samples, samples...)
					for _, s := range samples {
						a.moved += s.bytes + int64(len(body))
					}
				}
			}
		}
	}
	b.StopTimer()
	type row struct {
		ttfb50, ttfb99, done50, tail50 time.Duration
		machine, ours, oursGB          float64 // ms a request; s a GB
	}
	rows := map[key]row{}
	for _, k := range order {
		a := results[k]
		n := float64(len(a.samples))
		rows[k] = row{
			ttfb50:  quantile(a.samples, 0.5, func(s benchSample) time.Duration { return s.ttfb }),
			ttfb99:  quantile(a.samples, 0.99, func(s benchSample) time.Duration { return s.ttfb }),
			tail50:  quantile(a.samples, 0.5, func(s benchSample) time.Duration { return s.tail }),
			done50:  quantile(a.samples, 0.5, func(s benchSample) time.Duration { return s.done }),
			machine: 1000 * a.machine / n, ours: 1000 * a.ours / n, oursGB: a.ours / (float64(a.moved) / 1e9),
		}
	}
	var t strings.Builder
	fmt.Fprintf(&t, "\n%d requests per path and setting (%d rounds)\n", len(results[order[0]].samples), rounds)
	fmt.Fprintf(&t, "| path | conns | streams | TTFB p50 | added | TTFB p99 | stream p50 | delay | end p50 | CPU/req ours | added | CPU/GB ours | CPU/req machine |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, k := range order {
		r, d := rows[k], rows[key{"direct", k.keep, k.streams}]
		if _, ok := rows[key{"direct", k.keep, k.streams}]; !ok {
			d = r
		}
		fmt.Fprintf(&t, "| %s | %s | %d | %d µs | %+d µs | %d µs | %.1f ms | %+.2f%% | %d µs | %.2f ms | %+.2f ms | %.1f s | %.2f ms |\n",
			k.path, connMode(k.keep), k.streams,
			r.ttfb50.Microseconds(), (r.ttfb50 - d.ttfb50).Microseconds(), r.ttfb99.Microseconds(),
			float64(r.done50.Microseconds())/1000, 100*float64(r.done50-d.done50)/float64(d.done50), r.tail50.Microseconds(),
			r.ours, r.ours-d.ours, r.oursGB, r.machine)
		if k.path == "msg" && k.streams == 1 && !k.keep {
			b.ReportMetric(float64((r.ttfb50 - d.ttfb50).Microseconds()), "msg-added-ttfb-µs")
		}
	}
	// To stdout, whole: go test cuts a benchmark's b.Log short.
	fmt.Print(t.String())
}

// perRound is how many requests each round sends with streams at once
// (LMWARDEN_BENCH_PER_ROUND sets it for every setting).
func perRound(streams int) int {
	if n, err := strconv.Atoi(os.Getenv("LMWARDEN_BENCH_PER_ROUND")); err == nil && n > 0 {
		return n
	}
	if streams == 1 {
		return 12
	}
	return 2 * streams
}

// runBenchRound sends n requests to addr, streams at a time, and returns
// their timings and the CPU seconds they took: the machine's and ours.
func runBenchRound(tb testing.TB, addr string, keep bool, streams, n int, body string) ([]benchSample, float64, float64) {
	warm := newBenchClient(tb, addr, keep)
	warm.exchange(tb, body) // connections and pools set up
	warm.close()
	self := []int{os.Getpid()} // the client; the upstream and every path are its children
	m0, o0 := machineBusy(), ourBusy(self)
	out := make([]benchSample, 0, n)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := range streams {
		wg.Go(func() {
			c := newBenchClient(tb, addr, keep)
			defer c.close()
			for i := w; i < n; i += streams {
				s := c.exchange(tb, body)
				mu.Lock()
				out = append(out, s)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return out, machineBusy() - m0, ourBusy(self) - o0
}

func connMode(keep bool) string {
	if keep {
		return "keepalive"
	}
	return "fresh"
}

// benchSample is one exchange's timings.
type benchSample struct {
	ttfb, done time.Duration
	tail       time.Duration // last data to the body's end (tailWriter)
	bytes      int64
}

func quantile(s []benchSample, q float64, f func(benchSample) time.Duration) time.Duration {
	v := make([]time.Duration, len(s))
	for i, x := range s {
		v[i] = f(x)
	}
	sort.Slice(v, func(i, j int) bool { return v[i] < v[j] })
	return v[min(len(v)-1, int(q*float64(len(v))))]
}

// benchBody is the 50 KB request body: an agent's history.
func benchBody() string {
	return `{"model":"m","stream":true,"messages":[{"role":"user","content":"` +
		strings.Repeat("an agent's long history, resent every turn. ", 1150) + `"}]}`
}

// benchClient sends requests on one connection it keeps (keep-alive), or
// on a new connection each (fresh).
type benchClient struct {
	addr string
	keep bool
	c    net.Conn
	br   *bufio.Reader
}

func newBenchClient(tb testing.TB, addr string, keep bool) *benchClient {
	return &benchClient{addr: addr, keep: keep}
}

func (c *benchClient) close() {
	if c.c != nil {
		c.c.Close()
		c.c = nil
	}
}

// exchange sends one request and reads the whole streamed response.
func (c *benchClient) exchange(tb testing.TB, body string) benchSample {
	if c.c == nil {
		d := net.Dialer{Timeout: 5 * time.Second}
		d.SetMultipathTCP(false)
		conn, err := d.DialContext(context.Background(), "tcp", c.addr)
		if err != nil {
			tb.Fatal(err)
		}
		c.c, c.br = conn, bufio.NewReaderSize(conn, 64<<10)
	}
	defer func() {
		if !c.keep {
			c.close()
		}
	}()
	c.c.SetDeadline(time.Now().Add(60 * time.Second))
	msg := "POST /v1/messages HTTP/1.1\r\nHost: b\r\nX-Claude-Code-Session-Id: bench\r\nContent-Type: application/json\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\n\r\n" + body
	start := time.Now()
	if _, err := io.WriteString(c.c, msg); err != nil {
		tb.Fatal(err)
	}
	if _, err := c.br.Peek(1); err != nil {
		tb.Fatal(err)
	}
	ttfb := time.Since(start)
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		tb.Fatal(err)
	}
	tw := &tailWriter{}
	n, err := io.Copy(tw, resp.Body)
	end := time.Now()
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || n < int64(benchEvents())*64 {
		tb.Fatalf("response: status %d, %d bytes, %v", resp.StatusCode, n, err)
	}
	return benchSample{ttfb: ttfb, done: end.Sub(start), tail: end.Sub(tw.last), bytes: n}
}

// machineBusy is the machine's busy CPU time in seconds, all CPUs
// (/proc/stat: user, nice, system, irq, softirq, steal).
func machineBusy() float64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	var busy float64
	for i, v := range f[1:] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		x, _ := strconv.ParseFloat(v, 64)
		busy += x
	}
	return busy / 100 // USER_HZ
}

// startBenchPath starts what stands in front of the upstream for path
// (nothing for direct) and returns the address clients use, and how to
// stop it; "" when the path cannot run here (a peer proxy not installed).
func startBenchPath(tb testing.TB, bin, path, up string) (string, func()) {
	switch path {
	case "direct":
		return up, func() {}
	case "nginx":
		return startNginx(tb, up)
	case "haproxy":
		return startHAProxy(tb, up)
	}
	front := freeAddr(tb)
	// "msg@GOMAXPROCS=1": a warden with that in its environment (an A/B
	// of one knob in one run).
	var env []string
	if f := os.Getenv("LMWARDEN_PHASES"); f != "" { // the shim's profile (l7/datapath/phases.go), a file per path
		env = append(env, "LMWARDEN_PHASES="+f+"."+strings.NewReplacer("@", "-", "=", "-", "/", "-").Replace(path))
	}
	if p, e, ok := strings.Cut(path, "@"); ok {
		path = p
		if other, ok := strings.CutPrefix(e, "bin="); ok {
			bin = other // "msg@bin=/tmp/lmwarden-main": another build, side by side
		} else {
			env = append(env, e)
		}
	}
	args := []string{"serve", "--listen", front, "--replica", "http://" + up, "--admin", "off", "--datapath", path, "--log-level", "warn"}
	var dir string
	if path != "user" {
		dir = kerneltest.PinDir(tb)
		args = append(args, "--pin-dir", dir)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stderr = os.Stderr
	cmd.Env = append(os.Environ(), env...)
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	stop := func() {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
		if dir != "" {
			maps.Unload(maps.Options{Dir: dir})
		}
	}
	waitAccepting(tb, front, "lmwarden serve --datapath "+path+" to start", stop)
	return front, stop
}

// waitAccepting waits until addr accepts connections (at most 10 s); if
// it never does, the test fails after stop has stopped what was started.
func waitAccepting(tb testing.TB, addr, what string, stop func()) {
	tb.Helper()
	ok := false
	defer func() {
		if !ok { // Eventually failed the test: its Goexit runs this
			stop()
		}
	}()
	testutil.Eventually(tb, 10*time.Second, what, func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	ok = true
}

// startPeer runs a peer proxy in the foreground until stopped and waits
// until it accepts connections; "" if the binary is missing.
func startPeer(tb testing.TB, bin, addr string, args ...string) (string, func()) {
	path, err := exec.LookPath(bin)
	if err != nil {
		tb.Logf("%s not installed: skipped (scripts/bench-datapaths.sh installs it)", bin)
		return "", nil
	}
	cmd := exec.Command(path, args...)
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	// SIGTERM, not SIGKILL: nginx's master then stops its workers (killed,
	// it would leave them running).
	stop := func() {
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	}
	waitAccepting(tb, addr, bin+" to start on "+addr, stop)
	return addr, stop
}

// startNginx: Debian's nginx, one worker, hashing the session header,
// keep-alive to the upstream, unbuffered both ways (streams pass at once).
func startNginx(tb testing.TB, up string) (string, func()) {
	dir := tb.TempDir()
	addr := freeAddr(tb)
	conf := fmt.Sprintf(`worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path %[1]s/body; proxy_temp_path %[1]s/proxy;
  fastcgi_temp_path %[1]s/fcgi; uwsgi_temp_path %[1]s/uwsgi; scgi_temp_path %[1]s/scgi;
  upstream vllm { hash $http_x_claude_code_session_id consistent; server %[2]s; keepalive 64; }
  server {
    listen %[3]s;
    location / {
      proxy_pass http://vllm; proxy_http_version 1.1; proxy_set_header Connection "";
      proxy_buffering off; proxy_request_buffering off;
    }
  }
}
`, dir, up, addr)
	os.WriteFile(dir+"/nginx.conf", []byte(conf), 0o644)
	return startPeer(tb, "nginx", addr, "-c", dir+"/nginx.conf", "-g", "daemon off;")
}

// startHAProxy: Debian's HAProxy, one thread, balancing on the session
// header, no Nagle delay on the streams.
func startHAProxy(tb testing.TB, up string) (string, func()) {
	dir := tb.TempDir()
	addr := freeAddr(tb)
	conf := fmt.Sprintf(`global
  nbthread 1
defaults
  mode http
  option http-no-delay
  timeout connect 5s
  timeout client 60s
  timeout server 60s
frontend f
  bind %s
  default_backend b
backend b
  balance hdr(X-Claude-Code-Session-Id)
  server s1 %s
`, addr, up)
	os.WriteFile(dir+"/haproxy.cfg", []byte(conf), 0o644)
	return startPeer(tb, "haproxy", addr, "-f", dir+"/haproxy.cfg", "-db")
}

const benchUpstreamEnv = "LMWARDEN_BENCH_UPSTREAM"

// startBenchUpstream runs TestBenchUpstreamProcess, the benchmark's
// replica, in a process of its own until the benchmark ends.
func startBenchUpstream(tb testing.TB) string {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run", "^TestBenchUpstreamProcess$")
	cmd.Env = append(os.Environ(), benchUpstreamEnv+"=1")
	cmd.Stderr = os.Stderr
	line, err := testutil.StartChild(tb, cmd).ReadString('\n') // it exits when the test ends
	if err != nil {
		tb.Fatalf("bench upstream: %v", err)
	}
	return strings.TrimSpace(strings.TrimPrefix(line, "listening "))
}

// ourBusy is the CPU time, in seconds, of the processes pids and their
// descendants (the upstream, the wardens, nginx and its worker, HAProxy) and of the kernel's workers
// (kworker, ksoftirqd: deferred softirqs, psock backlogs), which other
// jobs share, so it is an upper bound of what these processes cost.
func ourBusy(pids []int) float64 {
	type proc struct {
		ppid   int
		ticks  float64
		kernel bool
	}
	procs := map[int]proc{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		st := string(b)
		open, end := strings.IndexByte(st, '('), strings.LastIndexByte(st, ')')
		if open < 0 || end < open || end+2 > len(st) {
			continue
		}
		comm := st[open+1 : end]
		f := strings.Fields(st[end+2:]) // from field 3 (state) on
		if len(f) < 13 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		ut, _ := strconv.ParseFloat(f[11], 64) // utime, field 14
		sy, _ := strconv.ParseFloat(f[12], 64) // stime, field 15
		procs[pid] = proc{ppid: ppid, ticks: ut + sy,
			kernel: strings.HasPrefix(comm, "kworker") || strings.HasPrefix(comm, "ksoftirqd")}
	}
	ours := map[int]bool{}
	for _, p := range pids {
		if p > 0 {
			ours[p] = true
		}
	}
	var total float64
	for pid, p := range procs {
		if p.kernel {
			total += p.ticks
			continue
		}
		for q := pid; q > 1; q = procs[q].ppid {
			if ours[q] {
				total += p.ticks
				break
			}
			if _, ok := procs[q]; !ok {
				break
			}
		}
	}
	return total / 100 // USER_HZ
}

// TestBenchUpstreamProcess is the benchmark's replica: it reads each
// request body, then streams 256 SSE events 1 ms apart, one write and
// flush each, and answers the warden's polls (/health, /metrics). It does
// nothing unless started by startBenchUpstream.
func TestBenchUpstreamProcess(t *testing.T) {
	if os.Getenv(benchUpstreamEnv) == "" {
		t.Skip("the benchmark's upstream process")
	}
	ln, err := l7.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ev := []byte("data: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"token\"}}\n\n")
	mux := http.NewServeMux()
	mux.HandleFunc("/health", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "vllm:num_requests_running 0\nvllm:num_requests_waiting 0\n")
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		f := w.(http.Flusher)
		for i := range benchEvents() {
			if i > 0 {
				time.Sleep(time.Millisecond)
			}
			w.Write(ev)
			f.Flush()
		}
	})
	fmt.Printf("listening %s\n", ln.Addr())
	go func() {
		io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}()
	(&http.Server{Handler: mux}).Serve(ln)
}

// benchEvents is the number of SSE events of a response: 256, or
// LMWARDEN_BENCH_EVENTS (fewer make a quick profile of TTFB alone).
func benchEvents() int {
	if n, err := strconv.Atoi(os.Getenv("LMWARDEN_BENCH_EVENTS")); err == nil && n > 0 {
		return n
	}
	return 256
}

// tailWriter notes when the response body's last data arrived: the
// sample's tail is from then to the body's end (its terminating chunk),
// which a path that relays the end apart from the data delays.
type tailWriter struct{ last time.Time }

func (t *tailWriter) Write(b []byte) (int, error) { t.last = time.Now(); return len(b), nil }
