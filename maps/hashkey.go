package maps

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
)

// pinHashKey is the pinned one-entry array that holds the session-hash key.
const pinHashKey = "lmw_hash_key"

// HashKeySize is the size of the session-hash key (SipHash-2-4's 128 bits).
const HashKeySize = 16

// HashKey returns the key of the session-id hash kept beside the pinned
// state, creating it from fresh random bytes the first time. The sessions
// map is keyed by that hash: a restarted warden that hashed with a new key
// would never find its sessions again, so the key lives as long as the
// state does (and goes with `lmwarden unload`). It is a map rather than a
// file because bpffs holds only BPF objects; it is pinned 0600 like the rest.
func (s *State) HashKey() ([]byte, error) {
	path := filepath.Join(s.dir, pinHashKey)
	key := make([]byte, HashKeySize)
	m, err := ebpf.LoadPinnedMap(path, nil)
	switch {
	case err == nil:
		defer m.Close()
		if err := m.Lookup(uint32(0), key); err != nil {
			return nil, fmt.Errorf("read %s: %w", path, err)
		}
		return key, nil
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("load %s: %w", path, err)
	}
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	m, err = ebpf.NewMap(&ebpf.MapSpec{
		Name: "lmw_hash_key", Type: ebpf.Array, KeySize: 4, ValueSize: HashKeySize, MaxEntries: 1,
	})
	if err != nil {
		return nil, fmt.Errorf("create the hash key map: %w", err)
	}
	defer m.Close()
	if err := m.Put(uint32(0), key); err != nil {
		return nil, err
	}
	if err := m.Pin(path); err != nil {
		return nil, fmt.Errorf("pin %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		return nil, err
	}
	return key, nil
}

// ReadHashKey reads the session-hash key pinned under dir (DefaultDir
// when ""), read-only and without creating it: what `lmwarden sessions
// --id` hashes a raw id with when the warden's config names no key.
func ReadHashKey(dir string) ([]byte, error) {
	if dir == "" {
		dir = DefaultDir
	}
	m, err := ebpf.LoadPinnedMap(filepath.Join(dir, pinHashKey), &ebpf.LoadPinOptions{ReadOnly: true})
	if err != nil {
		return nil, errors.Join(ErrNotLoaded, err)
	}
	defer m.Close()
	key := make([]byte, HashKeySize)
	if err := m.Lookup(uint32(0), key); err != nil {
		return nil, fmt.Errorf("read %s: %w", filepath.Join(dir, pinHashKey), err)
	}
	return key, nil
}
