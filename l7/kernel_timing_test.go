package l7_test

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lmwarden/lmwarden/agent"
	"github.com/lmwarden/lmwarden/agent/adminapi"
	"github.com/lmwarden/lmwarden/agent/placement"
	"github.com/lmwarden/lmwarden/kernel"
	"github.com/lmwarden/lmwarden/l7"
	"github.com/lmwarden/lmwarden/l7/http1"
	"github.com/lmwarden/lmwarden/maps"
)

// TestKernelTimesTheFirstBodyByteItCarried: over sk_msg the shim never
// sees a carried response, so its time to first byte is the kernel's own
// stamp of the first body byte it redirected (sock_state.first_ns), not
// the head's: a replica that sends a stream's head at once and its first
// event a pause later is timed at the event, on a pooled connection too.
func TestKernelTimesTheFirstBodyByteItCarried(t *testing.T) {
	forEachKernel(t, func(t *testing.T, p *kernel.Path) {
		if p.State.Mode() != maps.ModeMsg {
			return // sk_skb: the shim reads the head, and times it
		}
		const pause = 300 * time.Millisecond
		up := l7.RawUpstream(t, func(c net.Conn) {
			for {
				h, rest, err := http1.ReadHead(c, nil)
				if err != nil {
					return
				}
				if n := h.ContentLength - int64(len(rest)); n > 0 {
					if _, err := io.CopyN(io.Discard, c, n); err != nil {
						return
					}
				}
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
				time.Sleep(pause)
				io.WriteString(c, "6\r\ndata:1\r\n")
				io.WriteString(c, "6\r\ndata:2\r\n0\r\n\r\n")
			}
		})
		m := l7.MustModel(t, l7.ModelConfig(up))
		_, addr := l7.MustShim(t, m, kernelOptions(p))
		c := l7.MustDial(t, addr)
		const n = 3 // the later ones on the pooled upstream connection
		for range n {
			c.Send(t, "POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
			if resp, body := c.Response(t); resp.StatusCode != 200 || body != "data:1data:2" {
				t.Fatalf("%d %q", resp.StatusCode, body)
			}
		}
		l7.WaitInFlight(t, m)
		if c := kernelCounts(p); len(c) == 0 {
			t.Fatal("no kernel counts")
		} else {
			for k, v := range c {
				if v.Responses != n || !allCarried(v) {
					t.Fatalf("replica %v: %+v: every response must be carried by the kernel", k, v)
				}
			}
		}
		reg := prometheus.NewRegistry()
		reg.MustRegister(agent.NewCollector([]*placement.Model{m}, adminapi.BuildInfo{}))
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fams {
			if f.GetName() != "lmwarden_time_to_first_byte_seconds" {
				continue
			}
			h := f.GetMetric()[0].GetHistogram()
			// A lower bound only (a slow machine is never fast).
			if h.GetSampleCount() != n || h.GetSampleSum() < n*pause.Seconds() {
				t.Fatalf("time to first byte: %d samples, sum %.3fs: want %d, each at least the pause after the head (%v)", h.GetSampleCount(), h.GetSampleSum(), n, pause)
			}
			return
		}
		t.Fatal("no lmwarden_time_to_first_byte_seconds")
	})
}
