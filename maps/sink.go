package maps

import "time"

// SessionSink mirrors a model's session table into the pinned sessions
// map (it satisfies placement.SessionSink without importing agent: the data
// flow is agent -> maps -> bpf). Errors are dropped: the map is a mirror
// for inspection and restarts, never the source of a placement.
type SessionSink struct {
	S *State
	// Model is the model's index in the config: a restarted warden serving
	// several models puts each session back into its own model.
	Model uint32
}

// Upsert records hash on replica, seen now.
func (k SessionSink) Upsert(hash uint64, replica int) {
	k.S.PutSession(hash, uint32(replica), k.Model, time.Now())
}

// Delete forgets hash.
func (k SessionSink) Delete(hash uint64) { k.S.DeleteSession(hash) }
