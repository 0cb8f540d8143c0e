package maps

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func TestHashKeySurvivesWardenRestart(t *testing.T) {
	if !inNetNS(t) {
		return
	}
	s := mustState(t)
	k1, err := s.HashKey()
	if err != nil {
		t.Fatal(err)
	}
	if len(k1) != HashKeySize || bytes.Equal(k1, make([]byte, HashKeySize)) {
		t.Fatalf("key %x: want %d random bytes", k1, HashKeySize)
	}
	fi, err := os.Stat(filepath.Join(s.Dir(), pinHashKey))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("pinned key: %v, mode %v; want 0600", err, fi.Mode().Perm())
	}
	dir := s.Dir()
	s.Close()
	s2, err := Load(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	k2, err := s2.HashKey()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(k1, k2) {
		t.Fatalf("key changed across a restart: %x then %x", k1, k2)
	}
}
