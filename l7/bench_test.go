package l7

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lmwarden/lmwarden/l7/datapath"
	"github.com/lmwarden/lmwarden/l7/http1"
	"github.com/lmwarden/lmwarden/sim"
)

// BenchmarkTTFB measures the time to first response byte of a streamed
// one-token Anthropic request, directly to a simulated replica and through
// the shim, interleaved request by request so both arms see the same
// machine. keepalive: both clients reuse one connection (as the SDKs do);
// newconn: a new client connection a request (as `claude -p` does).
func BenchmarkTTFB(b *testing.B) {
	for _, mode := range []string{"keepalive", "newconn"} {
		b.Run(mode, func(b *testing.B) {
			sv := mustSim(b, 1, sim.ShapePorts)
			m := mustModel(b, modelConfig(sv.URLs()...))
			_, addr := mustShim(b, m, Options{})
			direct := strings.TrimPrefix(sv.URLs()[0], "http://")
			req := messagesRequestN("bench-session", []string{"hi"}, "", 1)
			arms := []*ttfbArm{{addr: direct, newConn: mode == "newconn"}, {addr: addr, newConn: mode == "newconn"}}
			for _, a := range arms { // warm up: connections, pool, caches
				for range 20 {
					a.once(b, req)
				}
				a.samples = a.samples[:0]
			}
			b.ResetTimer()
			for range b.N {
				for _, a := range arms {
					a.once(b, req)
				}
			}
			b.StopTimer()
			d50, d99 := percentiles(arms[0].samples)
			w50, w99 := percentiles(arms[1].samples)
			b.ReportMetric(d50, "direct-p50-µs")
			b.ReportMetric(d99, "direct-p99-µs")
			b.ReportMetric(w50, "warden-p50-µs")
			b.ReportMetric(w99, "warden-p99-µs")
			b.ReportMetric(w50-d50, "added-p50-µs")
			b.ReportMetric(w99-d99, "added-p99-µs")
			for _, a := range arms {
				a.close()
			}
		})
	}
}

type ttfbArm struct {
	addr    string
	newConn bool
	conn    net.Conn
	r       *bufio.Reader
	samples []float64 // µs
}

func (a *ttfbArm) once(b *testing.B, req string) {
	start := time.Now()
	if a.conn == nil || a.newConn {
		a.close()
		c, err := net.Dial("tcp", a.addr)
		if err != nil {
			b.Fatal(err)
		}
		a.conn, a.r = c, bufio.NewReaderSize(c, 64<<10)
	}
	if _, err := io.WriteString(a.conn, req); err != nil {
		b.Fatal(err)
	}
	if _, err := a.r.Peek(1); err != nil {
		b.Fatal(err)
	}
	a.samples = append(a.samples, float64(time.Since(start).Nanoseconds())/1e3)
	resp, err := http.ReadResponse(a.r, nil)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		b.Fatal(err)
	}
	resp.Body.Close()
}

func (a *ttfbArm) close() {
	if a.conn != nil {
		a.conn.Close()
		a.conn = nil
	}
}

func percentiles(s []float64) (p50, p99 float64) {
	if len(s) == 0 {
		return 0, 0
	}
	s = slices.Clone(s)
	slices.Sort(s)
	return s[len(s)/2], s[min(len(s)-1, len(s)*99/100)]
}

// BenchmarkStreamCPU measures CPU seconds per GB of a large chunked
// response, read directly from a raw upstream and through the shim, side
// by side. Client and upstream run in this process in both arms, so the
// difference of the two is what the shim adds. Chunks of 1 MiB are mostly
// spliced; 16 KiB chunks show the cost of per-chunk parsing.
func BenchmarkStreamCPU(b *testing.B) {
	const total = 256 << 20
	for _, chunk := range []int{1 << 20, 16 << 10} {
		b.Run(fmt.Sprintf("chunk=%dKiB", chunk>>10), func(b *testing.B) {
			up := rawUpstream(b, chunkedStreamer(total, chunk))
			m := mustModel(b, modelConfig(up))
			shim, addr := mustShim(b, m, Options{})
			direct := strings.TrimPrefix(up, "http://")
			var cpu [2]time.Duration
			b.SetBytes(total)
			b.ResetTimer()
			for range b.N {
				for i, a := range []string{direct, addr} {
					before := rusageCPU(b)
					streamOnce(b, a, total)
					cpu[i] += rusageCPU(b) - before
				}
			}
			b.StopTimer()
			gb := float64(b.N) * total / 1e9
			b.ReportMetric(cpu[0].Seconds()/gb, "direct-cpu-s/GB")
			b.ReportMetric(cpu[1].Seconds()/gb, "warden-cpu-s/GB")
			b.ReportMetric((cpu[1]-cpu[0]).Seconds()/gb, "added-cpu-s/GB")
			if u, ok := shim.Datapath().(*datapath.UserPath); ok {
				var down uint64
				for _, c := range u.Counts() {
					down += c.Down
				}
				if down < uint64(b.N)*total {
					b.Fatalf("datapath counted %d bytes down, want at least %d", down, uint64(b.N)*total)
				}
			}
		})
	}
}

// chunkedStreamer answers every request with a chunked body of total
// bytes in chunks of size chunk, then closes.
func chunkedStreamer(total, chunk int) func(net.Conn) {
	data := make([]byte, chunk)
	for i := range data {
		data[i] = 'a' + byte(i%26)
	}
	frame := append(append([]byte(fmt.Sprintf("%x\r\n", chunk)), data...), "\r\n"...)
	return func(c net.Conn) {
		if _, _, err := http1.ReadHead(c, nil); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
		for sent := 0; sent < total; sent += chunk {
			if _, err := c.Write(frame); err != nil {
				return
			}
		}
		io.WriteString(c, "0\r\n\r\n")
	}
}

// streamOnce fetches one whole response on a new connection (Connection:
// close, read to EOF) and checks that at least total bytes arrived.
func streamOnce(b *testing.B, addr string, total int) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET /stream HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	buf := make([]byte, 256<<10)
	n := 0
	for {
		k, err := c.Read(buf)
		n += k
		if err != nil {
			break
		}
	}
	if n < total {
		b.Fatalf("read %d bytes, want over %d", n, total)
	}
}

func rusageCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
