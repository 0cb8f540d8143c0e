package maps

import "time"

// SessionModelShift places a model's index in a session entry's flags:
// bits 0-15 are SESSION_* flags, bits 16-31 the index of the model (in the
// config's order) that pinned it, so that a restarted warden serving
// several models puts each session back into its own model.
const SessionModelShift = 16

// SessionSink mirrors a model's session table into the pinned sessions
// map (it satisfies agent.SessionSink without importing agent: the data
// flow is agent -> maps -> bpf). Errors are dropped: the map is a mirror
// for inspection and restarts, never the source of a placement.
type SessionSink struct {
	S     *State
	Model uint16 // the model's index in the config
}

// Upsert records hash on replica, seen now.
func (k SessionSink) Upsert(hash uint64, replica int) {
	k.S.PutSession(hash, uint32(replica), uint32(k.Model)<<SessionModelShift, time.Now())
}

// Delete forgets hash.
func (k SessionSink) Delete(hash uint64) { k.S.DeleteSession(hash) }
