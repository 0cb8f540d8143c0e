package picker_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/lmwarden/internal/testutil"
	"github.com/lmwarden/lmwarden/picker"
	"github.com/lmwarden/lmwarden/picker/pickertest"
)

// instantReplica answers at once: the benchmark measures what sits in
// front of a replica, not the replica.
func instantReplica(b *testing.B) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/health":
		case "/metrics":
			w.Header().Set("Content-Type", "text/plain; version=0.0.4")
			io.WriteString(w, "vllm:num_requests_running 0\nvllm:num_requests_waiting 0\n")
		default:
			io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "event: message_start\ndata: {}\n\n")
			w.(http.Flusher).Flush()
			io.WriteString(w, "event: message_stop\ndata: {}\n\n")
		}
	}))
	b.Cleanup(srv.Close)
	return srv.URL
}

// BenchmarkPickerTTFB is what the picker adds to a request's time to first
// byte, side by side in one run: the same keep-alive client and request,
// three hosts (each a real warden and shim over a replica that answers at
// once; the picker lists the other two as fallbacks), sent in turn
//
//	direct          to the first host's warden
//	gateway         through pickertest's gateway routing to the hosts by itself, in turn
//	gateway+picker  through the same gateway asking the picker over ext_proc, with the
//	                picker's defaults and allow_mode_override (the response head is
//	                skipped while the picked host is not in doubt)
//	gateway+picker-every-head  the same without allow_mode_override (Envoy's default):
//	                every response head goes to the picker, a second exchange before
//	                the first byte
//
// and reports each one's median and p99 in µs, and added-p50-µs, the
// median of gateway+picker less the median of gateway: the picker's share
// (the gateway's own cost is a stand-in's, not Envoy's), and
// added-every-head-p50-µs, the same for the every-head variant.
//
//	go test -run '^$' -bench PickerTTFB -benchtime 2000x ./picker/
func BenchmarkPickerTTFB(b *testing.B) {
	var hosts []*pickertest.Host
	var phs []picker.Host
	var eps []string
	for range 3 {
		h := pickertest.StartHost(b, pickertest.HostConfig{ReplicaURLs: []string{instantReplica(b)}})
		hosts, eps = append(hosts, h), append(eps, h.Endpoint)
		phs = append(phs, picker.Host{Endpoint: h.Endpoint, Admin: h.Admin})
	}
	host := hosts[0]
	s, err := picker.NewServer(picker.ServerConfig{
		Config: picker.Config{Hosts: phs, Logger: quiet},
		GRPC:   "127.0.0.1:0",
	})
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	testutil.Eventually(b, 10*time.Second, "every host ready", func() bool {
		for _, h := range s.Registry().Hosts() {
			if !h.Healthy {
				return false
			}
		}
		return true
	})
	front := func(cfg pickertest.Config) string {
		gw, err := pickertest.New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(gw.Close)
		srv := httptest.NewServer(gw)
		b.Cleanup(srv.Close)
		return srv.URL
	}
	paths := []struct {
		name, url string
		ttfb      []time.Duration
	}{
		{name: "direct", url: "http://" + host.Endpoint},
		{name: "gateway", url: front(pickertest.Config{Static: eps})},
		{name: "gateway+picker", url: front(pickertest.Config{ExtProc: s.GRPCAddr(), AllowModeOverride: true})},
		{name: "gateway+picker-every-head", url: front(pickertest.Config{ExtProc: s.GRPCAddr()})},
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	body := `{"model":"m","max_tokens":1,"stream":true,"messages":[{"role":"user","content":"` + strings.Repeat("x", 2000) + `"}]}`
	one := func(url string, i int) time.Duration {
		req, _ := http.NewRequest("POST", url+"/v1/messages", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Session-Id", fmt.Sprint("bench-", i%64))
		t0 := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		d := time.Since(t0)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("%s: status %d", url, resp.StatusCode)
		}
		return d
	}
	for i := range 200 { // warm every connection pool and the session table
		for _, p := range paths {
			one(p.url, i)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for k := range paths {
			paths[k].ttfb = append(paths[k].ttfb, one(paths[k].url, i))
		}
	}
	b.StopTimer()
	p50 := map[string]float64{}
	for _, p := range paths {
		slices.Sort(p.ttfb)
		med := float64(p.ttfb[len(p.ttfb)/2].Nanoseconds()) / 1e3
		p99 := float64(p.ttfb[len(p.ttfb)*99/100].Nanoseconds()) / 1e3
		p50[p.name] = med
		b.ReportMetric(med, p.name+"-p50-µs")
		b.ReportMetric(p99, p.name+"-p99-µs")
	}
	b.ReportMetric(p50["gateway+picker"]-p50["gateway"], "added-p50-µs")
	b.ReportMetric(p50["gateway+picker-every-head"]-p50["gateway"], "added-every-head-p50-µs")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkExtProcExchange is one request's whole ext_proc exchange as a
// gateway makes it (stream, request headers and the pick, response
// headers, end of stream), over real gRPC on loopback, without HTTP: the
// picker's cost per request and the transport's.
//
//	go test -run '^$' -bench ExtProcExchange ./picker/
func BenchmarkExtProcExchange(b *testing.B) {
	host := pickertest.StartHost(b, pickertest.HostConfig{ReplicaURLs: []string{instantReplica(b)}})
	s, err := picker.NewServer(picker.ServerConfig{
		Config: picker.Config{Hosts: []picker.Host{{Endpoint: host.Endpoint, Admin: host.Admin}}, Logger: quiet},
		GRPC:   "127.0.0.1:0",
	})
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	testutil.Eventually(b, 10*time.Second, "the host ready", s.Registry().Ready)
	c, err := pickertest.Dial(s.GRPCAddr())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	var picks, heads []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		pick, head, err := c.Exchange(fmt.Sprint("s", i%64), host.Endpoint)
		if err != nil {
			b.Fatal(err)
		}
		picks, heads = append(picks, pick), append(heads, head)
	}
	b.StopTimer()
	for name, xs := range map[string][]time.Duration{"pick": picks, "response-headers": heads} {
		slices.Sort(xs)
		b.ReportMetric(float64(xs[len(xs)/2].Nanoseconds())/1e3, name+"-p50-µs")
	}
}
