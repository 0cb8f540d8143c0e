package maps

import (
	"errors"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"

	"github.com/lmwarden/lmwarden/bpf"
)

// A warden upgraded in place adopts the sessions map its predecessor
// pinned. Before conversations had a parent and a kind, its values were
// 16 bytes (replica, model, last_seen_ns); a pinned map of another value
// size cannot be reused as it is, so its entries are read, the map is
// unpinned, and they go into the new one as sessions (the conversations
// they were), so that the upgrade keeps every conversation on its replica.

// oldSessionSize is the value size of the sessions map before
// conversations (struct session of three fields).
const oldSessionSize = 16

// takeOldSessions returns the entries of a sessions map pinned in dir
// with the old layout, and unpins it; nil when there is none (or it has
// the current layout). A pinned map of any other layout is unpinned and
// its entries dropped: nothing can read them.
func takeOldSessions(dir string, spec *ebpf.CollectionSpec) (map[uint64]Session, error) {
	ms, ok := spec.Maps[bpf.LmwardenMapLmwSessions]
	if !ok {
		return nil, nil
	}
	m, err := ebpf.LoadPinnedMap(filepath.Join(dir, bpf.LmwardenMapLmwSessions), nil)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer m.Close()
	if m.ValueSize() == ms.ValueSize {
		return nil, nil
	}
	out := map[uint64]Session{}
	if m.ValueSize() == oldSessionSize {
		var k uint64
		v := make([]byte, oldSessionSize)
		it := m.Iterate()
		for it.Next(&k, v) {
			out[k] = Session{
				Replica: nativeEndian.Uint32(v[0:]), Model: nativeEndian.Uint32(v[4:]),
				LastSeenNs: nativeEndian.Uint64(v[8:]), Kind: uint32(bpf.LmwardenConversationKindCONV_SESSION),
			}
		}
		if err := it.Err(); err != nil {
			return nil, err
		}
	}
	return out, m.Unpin()
}

// putBack writes the entries takeOldSessions read into the new map.
func (s *State) putBack(old map[uint64]Session) error {
	for h, v := range old {
		if err := s.objs.LmwSessions.Update(h, &v, ebpf.UpdateNoExist); err != nil && !errors.Is(err, ebpf.ErrKeyExist) {
			return err
		}
	}
	return nil
}
