package main

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/lmwarden/agent/placement"
	"github.com/lmwarden/lmwarden/maps"
	"github.com/lmwarden/lmwarden/maps/mapstest"
)

var lookupKey = []byte("0123456789abcdef")

// TestSessionsLooksUpARawIDLocally: --id hashes the raw id here with the
// warden's key (from --hash-key-file or the config) and shows that
// conversation and its subagents only; the raw id is in no request to
// the warden and in no output.
func TestSessionsLooksUpARawIDLocally(t *testing.T) {
	w, _ := mustWriteWarden(t, lookupKey)
	m := w.Models()[0]
	for _, r := range []placement.Request{
		{SessionID: "raw-session-A"}, {SessionID: "raw-session-A", AgentID: "raw-agent-1"}, {SessionID: "raw-session-B"},
	} {
		r.Now = time.Now()
		p, err := m.Place(r)
		if err != nil {
			t.Fatal(err)
		}
		m.Done(p, time.Now())
	}
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "hash.key")
	os.WriteFile(keyFile, []byte(hex.EncodeToString(lookupKey)+"\n"), 0o600)
	cfgFile := filepath.Join(dir, "lmwarden.yaml")
	os.WriteFile(cfgFile, []byte("hash_key_file: "+keyFile+"\nmodels:\n  - name: default\n    frontend: 127.0.0.1:18082\n    replicas: [http://127.0.0.1:1]\n"), 0o644)
	h := placement.NewSessionHasher(lookupKey)
	a, sub, b := fmt.Sprintf("%016x", h.Conversation("raw-session-A", "")), fmt.Sprintf("%016x", h.Conversation("raw-session-A", "raw-agent-1")), fmt.Sprintf("%016x", h.Conversation("raw-session-B", ""))

	for _, src := range [][]string{{"--hash-key-file", keyFile}, {"--config", cfgFile}} {
		var out bytes.Buffer
		if err := runSessions(append([]string{"--admin", w.AdminAddr(), "--id", "raw-session-A"}, src...), &out); err != nil {
			t.Fatal(err)
		}
		text := out.String()
		if !strings.Contains(text, a) || !strings.Contains(text, "└ "+sub) || strings.Contains(text, b) || strings.Contains(text, "raw-") {
			t.Errorf("%v: want A and its subagent, hashes only:\n%s", src, text)
		}
	}
	var out bytes.Buffer
	if err := runSessions([]string{"--admin", w.AdminAddr(), "--id", "raw-session-A", "--agent", "raw-agent-1", "--hash-key-file", keyFile}, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), sub) || strings.Contains(out.String(), a+" ") {
		t.Errorf("--agent: want the subagent only:\n%s", out.String())
	}
	if err := runSessions([]string{"--admin", w.AdminAddr(), "--id", "never-seen", "--hash-key-file", keyFile}, &out); err == nil || !strings.Contains(err.Error(), "no live conversation") {
		t.Errorf("unknown id: %v", err)
	}
	if err := runSessions([]string{"--admin", w.AdminAddr(), "--id", "x", "--pin-dir", filepath.Join(dir, "none")}, &out); !errors.Is(err, errNoHashKey) {
		t.Errorf("no key anywhere: %v, want errNoHashKey", err)
	}
	if err := runSessions([]string{"--agent", "y"}, &out); !errors.Is(err, errUsage) {
		t.Errorf("--agent without --id: %v", err)
	}
}

// TestSessionsFromMapsReadsThePinDirGiven: --from-maps reads the pinned
// map under --pin-dir (a warden started with serve --pin-dir), and --id
// hashes with the key pinned there.
func TestSessionsFromMapsReadsThePinDirGiven(t *testing.T) {
	if !mapstest.InNetNS(t) {
		return
	}
	dir := filepath.Join("/sys/fs/bpf", fmt.Sprintf("lmwarden-cli-%d", os.Getpid()))
	os.RemoveAll(dir)
	st, err := maps.Load(maps.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		st.Close()
		maps.Unload(maps.Options{Dir: dir})
	})
	key, err := st.HashKey()
	if err != nil {
		t.Fatal(err)
	}
	h := placement.NewSessionHasher(key)
	mine, other := h.Conversation("raw-pinned", ""), h.Conversation("raw-other", "")
	now := time.Now()
	if err := st.PutSession(mine, 1, 0, now); err != nil {
		t.Fatal(err)
	}
	if err := st.PutSession(other, 0, 0, now.Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := runSessions([]string{"--from-maps", "--pin-dir", dir}, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), fmt.Sprintf("%016x", mine)) || !strings.Contains(out.String(), fmt.Sprintf("%016x", other)) {
		t.Errorf("--from-maps --pin-dir %s:\n%s", dir, out.String())
	}
	out.Reset()
	if err := runSessions([]string{"--from-maps", "--pin-dir", dir, "--id", "raw-pinned"}, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), fmt.Sprintf("%016x", mine)) || strings.Contains(out.String(), fmt.Sprintf("%016x", other)) {
		t.Errorf("--id with the pinned key:\n%s", out.String())
	}
	if err := runSessions([]string{"--from-maps", "--pin-dir", filepath.Join(dir, "missing")}, &out); !errors.Is(err, maps.ErrNotLoaded) {
		t.Errorf("a pin dir with no state: %v", err)
	}
}
