package maps

import (
	"errors"
	"path/filepath"
	"time"

	"github.com/cilium/ebpf"

	"github.com/lmwarden/lmwarden/bpf"
)

// PutSession records that the session with keyed hash h of the model with
// index model (in the config) lives on replica.
func (s *State) PutSession(h uint64, replica, model uint32, lastSeen time.Time) error {
	return s.PutConversation(h, Session{Replica: replica, Model: model, LastSeenNs: uint64(lastSeen.UnixNano()),
		Kind: uint32(bpf.LmwardenConversationKindCONV_SESSION)})
}

// PutConversation records the conversation with keyed hash h.
func (s *State) PutConversation(h uint64, v Session) error {
	return s.objs.LmwSessions.Update(h, &v, ebpf.UpdateAny)
}

// DeleteSession forgets a session (expired); unknown is not an error.
func (s *State) DeleteSession(h uint64) error {
	err := s.objs.LmwSessions.Delete(h)
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return nil
	}
	return err
}

// LookupSession returns the entry for h.
func (s *State) LookupSession(h uint64) (Session, bool, error) {
	var v Session
	err := s.objs.LmwSessions.Lookup(h, &v)
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return v, false, nil
	}
	return v, err == nil, err
}

// Sessions calls fn for every session until it returns false.
func (s *State) Sessions(fn func(h uint64, v Session) bool) error {
	return iterateSessions(s.objs.LmwSessions, fn)
}

func iterateSessions(m *ebpf.Map, fn func(h uint64, v Session) bool) error {
	var k uint64
	var v Session
	it := m.Iterate()
	for it.Next(&k, &v) {
		if !fn(k, v) {
			return nil
		}
	}
	return it.Err()
}

// ReadSessions reads the pinned sessions map of the state at dir without
// taking the warden's lock (inspection while a warden runs).
func ReadSessions(dir string, fn func(h uint64, v Session) bool) error {
	if dir == "" {
		dir = DefaultDir
	}
	m, err := ebpf.LoadPinnedMap(filepath.Join(dir, bpf.LmwardenMapLmwSessions), &ebpf.LoadPinOptions{ReadOnly: true})
	if err != nil {
		return errors.Join(ErrNotLoaded, err)
	}
	defer m.Close()
	return iterateSessions(m, fn)
}
