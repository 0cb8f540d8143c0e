package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lmwarden/lmwarden/agent/adminapi"
	"github.com/lmwarden/lmwarden/kernel/kerneltest"
	"github.com/lmwarden/lmwarden/maps"
	"github.com/lmwarden/lmwarden/maps/mapstest"
)

// TestServeKernelRestartKeepsSessionsOnTheirReplicas runs `lmwarden serve
// --datapath kernel` in a namespace of its own, stops it, starts it again
// on the same pinned state, and checks that every conversation's next turn
// goes to the replica its earlier turns went to (the sessions map and the
// hash key survive; the new warden restores them).
func TestServeKernelRestartKeepsSessionsOnTheirReplicas(t *testing.T) {
	if !mapstest.InNetNS(t) {
		return
	}
	pinDir := kerneltest.PinDir(t)
	t.Cleanup(func() {
		if err := maps.Unload(maps.Options{Dir: pinDir}); err != nil {
			t.Error(err)
		}
	})
	urls := mustServeSim(t, 4)
	const front = "127.0.0.1:8000" // the frontend sk_lookup steers (our own namespace)
	args := append([]string{"--listen", front, "--admin", "127.0.0.1:9100", "--datapath", "kernel", "--pin-dir", pinDir}, replicaFlags(urls)...)
	ids := []string{"restart-a", "restart-b", "restart-c", "restart-d", "restart-e"}

	w := mustServe(t, args...)
	for _, id := range ids {
		sendTurn(t, front, id, []string{"first turn of " + id})
	}
	w.waitIdle(t)
	before := sessionReplicas(t, w)
	if len(before) != len(ids) {
		t.Fatalf("%d sessions before the restart, want %d", len(before), len(ids))
	}
	stopServe(t, w)

	w2 := mustServe(t, args...)
	if !strings.Contains(w2.logText(), "sessions restored") {
		t.Fatalf("the restarted warden restored nothing:\n%s", w2.logText())
	}
	for _, id := range ids {
		sendTurn(t, front, id, []string{"first turn of " + id, "reply", "second turn"})
	}
	w2.waitIdle(t)
	after := sessionReplicas(t, w2)
	for h, r := range before {
		if after[h] != r {
			t.Errorf("session %s: replica %d before the restart, %d after", h, r, after[h])
		}
	}
	if m := w2.models(t)[0]; m.StickyShare != 1 {
		t.Errorf("sticky share after the restart %v, want 1", m.StickyShare)
	}
}

// sessionReplicas maps each session hash to its replica (GET /api/v1/sessions).
func sessionReplicas(tb testing.TB, w *servedWarden) map[string]int {
	tb.Helper()
	resp, err := http.Get("http://" + w.admin + "/api/v1/sessions?limit=1000") // a page holds every session of this test
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	var sr adminapi.SessionsResponse
	if err := json.NewDecoder(resp.Body).Decode(&sr); err != nil {
		tb.Fatal(err)
	}
	out := map[string]int{}
	for _, s := range sr.Sessions {
		out[s.Hash] = s.Replica
	}
	return out
}

// stopServe sends SIGTERM and waits for a clean exit (the pinned state's
// lock is free after it).
func stopServe(tb testing.TB, w *servedWarden) {
	tb.Helper()
	w.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-w.exited:
		w.exited <- err // for mustServe's cleanup
		if err != nil {
			tb.Fatalf("serve exited with %v:\n%s", err, w.logText())
		}
	case <-time.After(30 * time.Second):
		tb.Fatalf("serve did not stop:\n%s", w.logText())
	}
}
