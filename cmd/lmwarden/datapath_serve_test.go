package main

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/lmwarden/lmwarden/kernel/kerneltest"
	"github.com/lmwarden/lmwarden/maps"
	"github.com/lmwarden/lmwarden/maps/mapstest"
)

// TestServeRunsTheKernelDatapathItSays runs `lmwarden serve` with each
// kernel datapath and checks, from the warden's own counters, that the
// responses were carried by the kernel and not relayed in userspace.
// (serve once handed the shim a wrapper of the datapath that hid its
// optional interfaces: sk_msg then carried nothing, every response
// crossed userspace, and only lmwarden_kernel_bytes_total showed it.)
func TestServeRunsTheKernelDatapathItSays(t *testing.T) {
	if !mapstest.InNetNS(t) {
		return
	}
	urls := mustServeSim(t, 2)
	for i, mode := range []string{"msg", "skb"} {
		t.Run(mode, func(t *testing.T) {
			if mode == "msg" {
				skipWhereMsgIsRefused(t)
			}
			pinDir := kerneltest.PinDir(t)
			t.Cleanup(func() {
				if err := maps.Unload(maps.Options{Dir: pinDir}); err != nil {
					t.Error(err)
				}
			})
			front := fmt.Sprintf("127.0.0.1:%d", 8010+i)
			admin := fmt.Sprintf("127.0.0.1:%d", 9110+i)
			w := mustServe(t, append([]string{"--listen", front, "--admin", admin, "--datapath", mode, "--pin-dir", pinDir}, replicaFlags(urls)...)...)
			for j := range 4 {
				sendTurn(t, front, fmt.Sprintf("carried-%s-%d", mode, j), []string{"a turn"})
			}
			w.waitIdle(t)
			bytes := kernelBytes(t, admin)
			if bytes["kernel"] == 0 {
				t.Fatalf("--datapath %s: the kernel carried no byte (lmwarden_kernel_bytes_total %v)", mode, bytes)
			}
			// sk_msg passes each response's last byte to the shim,
			// which relays it (and so knows the response ended).
			if mode == "msg" && bytes["user_down"] != 4 {
				t.Fatalf("--datapath msg: %.0f response bytes crossed userspace, want 4 (the last byte of each response; lmwarden_kernel_bytes_total %v)", bytes["user_down"], bytes)
			}
			// Each client connection to the frontend joined the
			// redirect targets in the kernel, during its handshake.
			if joins := metricByLabels(t, admin, "lmwarden_kernel_socket_joins_total", "socket", "outcome"); mode == "msg" &&
				(joins["client,joined"] == 0 || joins["client,failed"] != 0 || joins["replica,joined"] == 0) {
				t.Fatalf("--datapath msg: lmwarden_kernel_socket_joins_total %v: want the client connections and the replicas' sockets joined by the kernel", joins)
			}
		})
	}
}

// metricByLabels reads the counter name from admin's /metrics, summed by
// the values of the labels named (joined with commas).
func metricByLabels(tb testing.TB, admin, name string, labels ...string) map[string]float64 {
	tb.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get("http://" + admin + "/metrics")
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	dec := expfmt.NewDecoder(resp.Body, expfmt.ResponseFormat(resp.Header))
	for {
		var mf dto.MetricFamily
		if err := dec.Decode(&mf); err != nil {
			return out
		}
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			vals := make([]string, len(labels))
			for _, l := range m.GetLabel() {
				if i := slices.Index(labels, l.GetName()); i >= 0 {
					vals[i] = l.GetValue()
				}
			}
			out[strings.Join(vals, ",")] += m.GetCounter().GetValue()
		}
	}
}

// kernelBytes sums lmwarden_kernel_bytes_total by its path label.
func kernelBytes(tb testing.TB, admin string) map[string]float64 {
	return metricByLabels(tb, admin, "lmwarden_kernel_bytes_total", "path")
}
