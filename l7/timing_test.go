package l7

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/lmwarden/lmwarden/agent"
	"github.com/lmwarden/lmwarden/agent/adminapi"
	"github.com/lmwarden/lmwarden/agent/placement"
	"github.com/lmwarden/lmwarden/l7/datapath"
)

// The shim times what the client feels: the first byte of a streamed
// body (not the head, which a streaming replica sends at once) and the
// end of the response; the model exports both as histograms per replica.
func TestShimTimesFirstStreamedByteAndDuration(t *testing.T) {
	const pause = 300 * time.Millisecond
	up := rawUpstream(t, func(c net.Conn) {
		for {
			h, rest, err := readRequestHead(c)
			if err != nil {
				return
			}
			if n := h.ContentLength - int64(len(rest)); n > 0 {
				if _, err := io.CopyN(io.Discard, c, n); err != nil {
					return
				}
			}
			if h.Target == "/stream" {
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
				time.Sleep(pause)
				io.WriteString(c, "6\r\ndata:1\r\n")
				time.Sleep(pause)
				io.WriteString(c, "6\r\ndata:2\r\n0\r\n\r\n")
			} else {
				time.Sleep(pause)
				io.WriteString(c, lengthResponse("whole"))
			}
		}
	})
	m := mustModel(t, modelConfig(up))
	_, addr := mustShim(t, m, Options{Datapath: datapath.NewUserPath()})
	c := mustDial(t, addr)
	for _, target := range []string{"/stream", "/whole"} {
		c.send(t, rawRequest("POST", target, "X-Session-Id: s\r\n", "{}"))
		if resp, body := c.response(t); resp.StatusCode != 200 || body == "" {
			t.Fatalf("%s: %d %q", target, resp.StatusCode, body)
		}
	}
	waitInFlight(t, m)

	reg := prometheus.NewRegistry()
	reg.MustRegister(agent.NewCollector([]*placement.Model{m}, adminapi.BuildInfo{}))
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	hist := func(name string) *dto.Histogram {
		for _, f := range fams {
			if f.GetName() == name {
				return f.GetMetric()[0].GetHistogram()
			}
		}
		t.Fatalf("no %s", name)
		return nil
	}
	fb, d := hist("lmwarden_time_to_first_byte_seconds"), hist("lmwarden_request_duration_seconds")
	if fb.GetSampleCount() != 2 || d.GetSampleCount() != 2 {
		t.Fatalf("counts %d %d, want 2", fb.GetSampleCount(), d.GetSampleCount())
	}
	// Lower bounds only (the machine may be slow, never fast): the stream's
	// first byte came a pause after its head, the whole body a pause after
	// the request. The stream's end came a pause after its first event,
	// but a loaded machine may time that first event late and its end on
	// time (a full run saw 0.294 s): half a pause still tells an end timed
	// at the first event (0) from one timed at the end.
	if fb.GetSampleSum() < (2 * pause).Seconds() {
		t.Errorf("time to first byte sum %.3fs: the stream's was timed at its head", fb.GetSampleSum())
	}
	if d.GetSampleSum()-fb.GetSampleSum() < (pause / 2).Seconds() {
		t.Errorf("duration sum %.3fs, first byte %.3fs: the stream's end was not a pause after its first event", d.GetSampleSum(), fb.GetSampleSum())
	}
}

// The shim's families have their series before the first connection: one
// per status it may answer, and the byte counters of every replica.
func TestShimSeriesExistBeforeTraffic(t *testing.T) {
	m := mustModel(t, modelConfig(deadURL(t), deadURL(t)))
	s, _ := mustShim(t, m, Options{Datapath: datapath.NewUserPath()})
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(s))
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	series := map[string]int{}
	for _, f := range fams {
		series[f.GetName()] = len(f.GetMetric())
	}
	want := map[string]int{
		"lmwarden_shim_connections_total": 1, "lmwarden_shim_requests_total": 1,
		"lmwarden_shim_answered_total": len(answeredCodes), "lmwarden_datapath_bytes_total": 2 * 2,
	}
	for name, n := range want {
		if series[name] != n {
			t.Errorf("%s: %d series, want %d", name, series[name], n)
		}
	}
}
