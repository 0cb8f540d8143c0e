package l7

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
	"testing"
	"time"

	"github.com/lmwarden/lmwarden/agent"
)

// BenchmarkDatapaths compares, side by side in one run on loopback, a
// client talking to the upstream directly, through the shim with the
// kernel datapath, and through the shim with the userspace datapath. Each
// request is a new connection (as each `claude -p` turn is) with a 50 KB
// body, answered by a 256-event SSE stream written in 256 flushes. Two
// reference paths separate what pooling costs here: direct-keepalive (the
// client reuses one connection to the upstream, as the shims' pools do)
// and kernel-fresh (the kernel datapath dialling a new upstream
// connection per request, as before it pooled). Metrics:
// time to first response byte (p50, p99), requests/s, and CPU seconds per
// GB moved, system-wide from /proc/stat (the kernel path's work runs in
// softirq and kworkers, outside this process), so other load on the
// machine shows up in it: compare within one run. proc-cpu-s/GB counts
// only the benchmark's own processes and the kernel's workers (benchCPU).
//
//	go test -run '^$' -bench Datapaths -benchtime 400x ./l7/
func BenchmarkDatapaths(b *testing.B) {
	requireBPF(b)
	up := benchUpstream(b)
	body := strings.Repeat("x", 50<<10)
	m, err := agent.NewModel(modelConfig("http://"+up), agent.ModelOptions{})
	if err != nil {
		b.Fatal(err)
	}
	k := mustKernelPath(b)
	_, kernelAddr := mustShim(b, m, Options{Datapath: k})
	_, userAddr := mustShim(b, m, Options{Datapath: NewUserPath()})
	// A pool that keeps nothing: every request dials.
	_, freshAddr := mustShim(b, m, Options{Datapath: k, Upstreams: NewUpstreams(3*time.Second, 4*time.Second, 0)})
	paths := []struct{ name, addr string }{
		{"direct", up}, {"direct-keepalive", up}, {"kernel", kernelAddr}, {"kernel-fresh", freshAddr}, {"user", userAddr},
	}
	if a := startNginx(b, up); a != "" {
		paths = append(paths, struct{ name, addr string }{"nginx", a})
	}
	if a := startHAProxy(b, up); a != "" {
		paths = append(paths, struct{ name, addr string }{"haproxy", a})
	}
	for _, c := range paths {
		b.Run(c.name, func(b *testing.B) {
			ttfb := make([]time.Duration, 0, b.N)
			var moved int64
			cpu0, own0 := procStatBusy(), benchCPU()
			send := func() (time.Duration, int64) { return benchRequest(b, c.addr, body) }
			if c.name == "direct-keepalive" {
				send = keepAliveRequester(b, c.addr, body)
			}
			start := time.Now()
			for range b.N {
				t, n := send()
				ttfb = append(ttfb, t)
				moved += n + int64(len(body))
			}
			elapsed := time.Since(start)
			cpu, own := procStatBusy()-cpu0, benchCPU()-own0
			sort.Slice(ttfb, func(i, j int) bool { return ttfb[i] < ttfb[j] })
			b.ReportMetric(float64(ttfb[len(ttfb)/2].Microseconds()), "ttfb-p50-µs")
			b.ReportMetric(float64(ttfb[len(ttfb)*99/100].Microseconds()), "ttfb-p99-µs")
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "req/s")
			b.ReportMetric(cpu/(float64(moved)/1e9), "cpu-s/GB")
			b.ReportMetric(own/(float64(moved)/1e9), "proc-cpu-s/GB")
		})
	}
	if c, ok := k.Counts()[ReplicaKey{"m", 0}]; ok {
		total := c.KernelBytes + c.PassedBytes + c.UserUp + c.UserDown
		b.Logf("kernel path: %d of %d bytes in the kernel (%.1f%%)", c.KernelBytes, total, 100*float64(c.KernelBytes)/float64(max(total, 1)))
	}
}

// benchUpstream streams 256 SSE events (one flush each) after reading the
// whole request body. It runs in a process of its own (this test binary
// again, see TestBenchUpstreamProcess), as a replica does: inside the
// benchmark's process its burst of 256 writes competed for the Go
// runtime's two Ps with the shim's goroutines, and the shim's wake-up for
// the response head waited for it (measured: 300-500 µs from the
// upstream's first flush to the shim's read of the head, in user and
// kernel mode alike).
func benchUpstream(tb testing.TB) string {
	cmd := exec.Command(os.Args[0], "-test.run", "^TestBenchUpstreamProcess$")
	cmd.Env = append(os.Environ(), benchUpstreamEnv+"=1")
	cmd.Stderr = os.Stderr
	// Its stdin is a pipe from this process: it exits when that closes,
	// also when this process dies without its cleanup.
	in, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { in.Close(); cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		tb.Fatalf("bench upstream: %v", err)
	}
	return strings.TrimSpace(strings.TrimPrefix(line, "listening "))
}

const benchUpstreamEnv = "LMWARDEN_BENCH_UPSTREAM"

// TestBenchUpstreamProcess is benchUpstream's server process; it does
// nothing unless started by benchUpstream.
func TestBenchUpstreamProcess(t *testing.T) {
	if os.Getenv(benchUpstreamEnv) == "" {
		t.Skip("the benchmark's upstream process")
	}
	ln, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ev := []byte("data: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"token\"}}\n\n")
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		f := w.(http.Flusher)
		for range 256 {
			w.Write(ev)
			f.Flush()
		}
	})}
	fmt.Printf("listening %s\n", ln.Addr())
	go func() {
		io.Copy(io.Discard, os.Stdin) // until the benchmark's end of the pipe closes
		os.Exit(0)
	}()
	srv.Serve(ln) // until the benchmark kills this process
}

// benchRequest sends one request on a new connection and reads the whole
// response; it returns the time to the first response byte and the bytes
// of the response.
func benchRequest(tb testing.TB, addr, body string) (time.Duration, int64) {
	c := benchDial(tb, addr)
	defer c.Close()
	return timedExchange(tb, c, bufio.NewReaderSize(c, 64<<10), benchMessage(body))
}

// keepAliveRequester returns a func that sends benchRequest's request on
// one connection it keeps open, like a pooled upstream connection.
func keepAliveRequester(tb testing.TB, addr, body string) func() (time.Duration, int64) {
	c := benchDial(tb, addr)
	tb.Cleanup(func() { c.Close() })
	br := bufio.NewReaderSize(c, 64<<10)
	msg := benchMessage(body)
	return func() (time.Duration, int64) { return timedExchange(tb, c, br, msg) }
}

func benchDial(tb testing.TB, addr string) net.Conn {
	d := net.Dialer{}
	d.SetMultipathTCP(false)
	c, err := d.DialContext(context.Background(), "tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// benchMessage is the benchmark's request: head and a JSON body.
func benchMessage(body string) string {
	return "POST /v1/messages HTTP/1.1\r\nHost: b\r\nX-Claude-Code-Session-Id: bench\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
}

// timedExchange writes msg on c, times the first response byte and reads
// the whole response (at least the 256 events the upstream streams).
func timedExchange(tb testing.TB, c net.Conn, br *bufio.Reader, msg string) (time.Duration, int64) {
	c.SetDeadline(time.Now().Add(30 * time.Second))
	start := time.Now()
	if _, err := io.WriteString(c, msg); err != nil {
		tb.Fatal(err)
	}
	if _, err := br.Peek(1); err != nil {
		tb.Fatal(err)
	}
	ttfb := time.Since(start)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		tb.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil || n < 256*80 {
		tb.Fatalf("response: %d bytes, %v", n, err)
	}
	return ttfb, n
}

// benchCPU is the CPU time, in seconds, of the processes that carry the
// benchmark's traffic: this one (client and shim) and its descendants (the
// upstream, nginx and its worker, HAProxy), plus the kernel's workers
// (kworker, ksoftirqd: psock backlogs, deferred softirqs). Unlike
// procStatBusy it leaves out other work on a shared machine (measured:
// another job took half of both CPUs during a run); the kernel workers
// are shared with it, so it is not exact either.
func benchCPU() float64 {
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
	self := os.Getpid()
	var total float64
	for pid, p := range procs {
		if p.kernel {
			total += p.ticks
			continue
		}
		for q := pid; q > 1; {
			if q == self {
				total += p.ticks
				break
			}
			parent, ok := procs[q]
			if !ok {
				break
			}
			q = parent.ppid
		}
	}
	return total / 100 // USER_HZ
}

// procStatBusy is the machine's busy CPU time in seconds (all CPUs).
func procStatBusy() float64 {
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

// freePort returns a loopback address nothing listens on.
func freePort(tb testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startPeer runs a peer proxy in the foreground until the benchmark ends
// and waits until it accepts connections; "" if the binary is missing.
func startPeer(tb testing.TB, bin, addr string, args ...string) string {
	path, err := exec.LookPath(bin)
	if err != nil {
		tb.Logf("%s not installed: skipped", bin)
		return ""
	}
	cmd := exec.Command(path, args...)
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for range 200 {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return addr
		}
		time.Sleep(10 * time.Millisecond)
	}
	tb.Fatalf("%s did not start on %s", bin, addr)
	return ""
}

// startNginx: Debian's nginx, one worker, hashing the session header.
func startNginx(tb testing.TB, up string) string {
	dir := tb.TempDir()
	addr := freePort(tb)
	conf := fmt.Sprintf(`worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path %[1]s/body; proxy_temp_path %[1]s/proxy;
  fastcgi_temp_path %[1]s/fcgi; uwsgi_temp_path %[1]s/uwsgi; scgi_temp_path %[1]s/scgi;
  upstream vllm { hash $http_x_claude_code_session_id consistent; server %[2]s; keepalive 32; }
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

// startHAProxy: Debian's HAProxy, one thread, balancing on the session header.
func startHAProxy(tb testing.TB, up string) string {
	dir := tb.TempDir()
	addr := freePort(tb)
	conf := fmt.Sprintf(`global
  nbthread 1
defaults
  mode http
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
