package maps

// Stats sums one replica's per-CPU counters.
func (s *State) Stats(replica uint32) (ReplicaStats, error) {
	var per []ReplicaStats
	var sum ReplicaStats
	if err := s.objs.LmwStats.Lookup(replica, &per); err != nil {
		return sum, err
	}
	for _, p := range per {
		sum.Requests += p.Requests
		sum.Responses += p.Responses
		sum.BytesKernel += p.BytesKernel
		sum.BytesUser += p.BytesUser
	}
	return sum, nil
}

// TotalStats sums the counters of replicas [0, n).
func (s *State) TotalStats(n int) (ReplicaStats, error) {
	var sum ReplicaStats
	for i := range n {
		r, err := s.Stats(uint32(i))
		if err != nil {
			return sum, err
		}
		sum.Requests += r.Requests
		sum.Responses += r.Responses
		sum.BytesKernel += r.BytesKernel
		sum.BytesUser += r.BytesUser
	}
	return sum, nil
}
