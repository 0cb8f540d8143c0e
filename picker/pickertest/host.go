package pickertest

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/lmwarden/lmwarden/agent"
	"github.com/lmwarden/lmwarden/agent/config"
	"github.com/lmwarden/lmwarden/l7"
	"github.com/lmwarden/lmwarden/l7/datapath"
	"github.com/lmwarden/lmwarden/sim"
)

// Host is one GPU host in a test, all in this process on loopback:
// simulated replicas, a warden (placement, admin API) and its shim (the
// frontend the gateway sends requests to).
type Host struct {
	// Endpoint is the warden's frontend (ip:port), Admin its admin API's
	// base URL.
	Endpoint string
	Admin    string
	Sim      *sim.Servers // nil with HostConfig.ReplicaURLs
	Warden   *agent.Warden

	shim     *l7.Shim
	stopOnce sync.Once
}

// HostConfig is one test host.
type HostConfig struct {
	Replicas int     // default 2
	Speed    float64 // the replicas' speed (default 50)
	// HashKey is the warden's session-hash key (nil: random).
	HashKey []byte
	// Records, when set, is told about every request a replica answered.
	Records func(sim.RequestRecord)
	// Replicas, when set, are the replicas' URLs (the warden's upstreams)
	// instead of simulated ones.
	ReplicaURLs []string
}

// StartHost starts a host; it stops with the test.
func StartHost(tb testing.TB, hc HostConfig) *Host {
	tb.Helper()
	if hc.Replicas == 0 {
		hc.Replicas = 2
	}
	if hc.Speed == 0 {
		hc.Speed = 50
	}
	var sv *sim.Servers
	urls := hc.ReplicaURLs
	if len(urls) == 0 {
		var err error
		sv, err = sim.Serve(context.Background(), sim.ServerConfig{Replicas: hc.Replicas, Listen: "127.0.0.1:0", Speed: hc.Speed, OnRequest: hc.Records})
		if err != nil {
			tb.Fatal(err)
		}
		urls = sv.URLs()
	}
	ln, err := l7.Listen("127.0.0.1:0")
	if err != nil {
		if sv != nil {
			sv.Close()
		}
		tb.Fatal(err)
	}
	cfg := config.DefaultConfig()
	cfg.PollInterval = 50 * time.Millisecond
	cfg.HashKey = hc.HashKey
	if err := cfg.ApplyFlags(ln.Addr().String(), "127.0.0.1:0", "user", urls); err != nil {
		tb.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	w, err := agent.NewWithOptions(cfg, agent.Options{Logger: quiet})
	if err != nil {
		tb.Fatal(err)
	}
	shim := l7.NewShim(w.Models()[0], l7.Options{Datapath: datapath.NewUserPath(), Logger: quiet})
	go shim.Serve(ln)
	if err := w.Start(context.Background()); err != nil {
		tb.Fatal(err)
	}
	w.SetServing(true)
	h := &Host{Endpoint: ln.Addr().String(), Admin: "http://" + w.AdminAddr(), Sim: sv, Warden: w, shim: shim}
	tb.Cleanup(h.Stop)
	return h
}

// Stop kills the host: its frontend, admin API and replicas stop
// answering (connections are refused from now on).
func (h *Host) Stop() {
	h.stopOnce.Do(func() {
		h.shim.Close()
		h.Warden.Close()
		if h.Sim != nil {
			h.Sim.Close()
		}
	})
}

// Drain starts the warden's shutdown as SIGTERM does: /readyz answers 503
// while the frontend still serves.
func (h *Host) Drain() { h.Warden.SetServing(false) }
