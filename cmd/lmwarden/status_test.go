package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/lmwarden/agent"
	"github.com/lmwarden/lmwarden/agent/config"
	"github.com/lmwarden/lmwarden/agent/placement"
	"github.com/lmwarden/lmwarden/l7/datapath"
	"github.com/lmwarden/lmwarden/sim"
)

// mustAdminWarden runs a warden with two sim replicas and an admin server
// on a free loopback port, and places a few requests.
func mustAdminWarden(tb testing.TB) *agent.Warden {
	tb.Helper()
	s, err := sim.Serve(context.Background(), sim.ServerConfig{Replicas: 2, Listen: "127.0.0.1:0", Speed: 50})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	cfg := config.DefaultConfig()
	if err := cfg.ApplyFlags("127.0.0.1:18080", "127.0.0.1:0", "user", s.URLs()); err != nil {
		tb.Fatal(err)
	}
	w, err := agent.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { w.Close() })
	m := w.Models()[0]
	for i := range 3 {
		p, err := m.Place(placement.Request{SessionID: "cli-session", Now: time.Now()})
		if err != nil {
			tb.Fatal(err)
		}
		if i < 2 {
			m.Done(p, time.Now())
		}
	}
	return w
}

func TestStatusPrintsModelAndReplicaTables(t *testing.T) {
	w := mustAdminWarden(t)
	var out bytes.Buffer
	if err := runStatus([]string{"--admin", w.AdminAddr()}, &out); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, want := range []string{"MODEL", "AFFINITY", "STICKY", "HIT-RATE", "default", "127.0.0.1:18080", "100.0%", "sticky", "ADMISSION"} {
		if !strings.Contains(text, want) {
			t.Errorf("status output lacks %q:\n%s", want, text)
		}
	}
	// header, model, blank, header, 2 replicas, blank, admission header and
	// row (the default policy, sticky, runs under admission)
	if lines := strings.Count(text, "\n"); lines != 9 {
		t.Errorf("%d lines:\n%s", lines, text)
	}
}

func TestStatusSaysWhichDatapathRuns(t *testing.T) {
	w := mustAdminWarden(t)
	w.Registry().MustRegister(datapathInfo{&servedDatapath{Datapath: datapath.NewUserPath(), reason: "auto: no kernel datapath loads here"}})
	var out bytes.Buffer
	if err := runStatus([]string{"--admin", w.AdminAddr()}, &out); err != nil {
		t.Fatal(err)
	}
	if first, _, _ := strings.Cut(out.String(), "\n"); first != "DATAPATH  user (auto: no kernel datapath loads here)" {
		t.Errorf("first line %q:\n%s", first, out.String())
	}
	out.Reset()
	if err := runStatus([]string{"--admin", w.AdminAddr(), "--json"}, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), `"datapath": {`) || !strings.Contains(out.String(), `"name": "user"`) {
		t.Errorf("JSON lacks the datapath:\n%s", out.String())
	}
}

func TestStatusReportsUnreachableAdmin(t *testing.T) {
	err := runStatus([]string{"--admin", "127.0.0.1:1"}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "lmwarden serve") {
		t.Errorf("error %v", err)
	}
	if err := runStatus([]string{"extra"}, &bytes.Buffer{}); !errors.Is(err, errUsage) {
		t.Errorf("extra argument: %v", err)
	}
}

func TestStatusShowsAdmissionForPolicyCost(t *testing.T) {
	w := mustAdminWarden(t)
	m := w.Models()[0]
	if err := m.SetPolicy(config.PolicyCost); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := runStatus([]string{"--admin", w.AdminAddr()}, &out); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, want := range []string{"LIVE/BUDGET", "ADMISSION", "ENGAGED", "LIVE-LOAD", "OLDEST-WAIT", "WAIT-P95", "auto", "60s"} {
		if !strings.Contains(text, want) {
			t.Errorf("status output lacks %q:\n%s", want, text)
		}
	}
	// each replica's live context over its budget: the sim's 46,720
	// tokens, or the 32,000-token prior before the first poll
	if !strings.Contains(text, "k/46.7k") && !strings.Contains(text, "k/32.0k") {
		t.Errorf("no live/budget per replica:\n%s", text)
	}
}
