package maps

// SweepClosed deletes the control and state entries of sockets that left
// their SOCKHASH (the kernel removes a socket from it when it closes:
// lmw_socks holds both sockets of an sk_skb exchange; an sk_msg entry is
// keyed by the warden's upstream socket, alive while its replica end is
// in lmw_replica_socks) and
// were already absent at the previous sweep, passed in as prev (the
// grace period covers an entry created just before its socket is added).
// It returns the absent cookies for the next call.
func (s *State) SweepClosed(prev map[uint64]bool) (absent map[uint64]bool) {
	absent = map[uint64]bool{}
	var k uint64
	var st SockState
	it := s.objs.LmwSockStates.Iterate()
	for it.Next(&k, &st) {
		if !s.SocketInMap(k) && !s.Paired(k) {
			absent[k] = true
		}
	}
	for k := range absent {
		if prev[k] {
			s.objs.LmwSockCtls.Delete(k)
			s.objs.LmwSockStates.Delete(k)
			delete(absent, k)
		}
	}
	return absent
}

// SocketEntries counts the control and state entries (for leak checks).
func (s *State) SocketEntries() (ctls, states int) {
	var k uint64
	var c SockCtl
	var st SockState
	for it := s.objs.LmwSockCtls.Iterate(); it.Next(&k, &c); {
		ctls++
	}
	for it := s.objs.LmwSockStates.Iterate(); it.Next(&k, &st); {
		states++
	}
	return ctls, states
}
