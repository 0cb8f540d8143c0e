package placement

// Conversation is the keyed hash the session table files the conversation
// of a raw session id (and, for a subagent, its agent id) under: what
// `lmwarden sessions --id` computes on the operator's side, with the
// warden's key, so that no raw id ever travels to the warden to be looked
// up. It is the hash conversationOf gives the same request.
func (h SessionHasher) Conversation(session, agent string) uint64 {
	if agent != "" {
		return h.Hash(session + agentSep + agent)
	}
	return h.Hash(session)
}
