package placement

import (
	"encoding/binary"
	"sort"
)

// Policy `hash` is a consistent hash of the session id over the healthy
// replicas: what nginx, HAProxy and Envoy users run today. Sticky, and
// blind to load. Requests without a session id go round robin.

// The ring: ringVirtualNodes points per replica, each the fixed-key SipHash
// of "url#v", so that adding or removing one replica moves only its share
// of sessions. Unhealthy replicas are skipped clockwise, so their sessions
// spread over the others.
const ringVirtualNodes = 160

type hashPolicy struct{ ring []ringPoint }

type ringPoint struct {
	at      uint64
	replica int32
}

func newHashPolicy(m *Model, _ ModelOptions) policy { return &hashPolicy{ring: buildRing(m.reps)} }

func (p *hashPolicy) pick(m *Model, h uint64, _ Request) int {
	if h == 0 {
		return m.roundRobin()
	}
	k := sort.Search(len(p.ring), func(j int) bool { return p.ring[j].at >= h })
	for step := range len(p.ring) {
		q := p.ring[(k+step)%len(p.ring)]
		if m.reps[q.replica].healthy {
			return int(q.replica)
		}
	}
	return m.roundRobin()
}

func buildRing(reps []replica) []ringPoint {
	fixed := SessionHasher{}
	ring := make([]ringPoint, 0, len(reps)*ringVirtualNodes)
	var b []byte
	for i := range reps {
		for v := range ringVirtualNodes {
			b = append(b[:0], reps[i].url...)
			b = append(b, '#')
			b = binary.AppendUvarint(b, uint64(v))
			ring = append(ring, ringPoint{at: fixed.Hash(string(b)), replica: int32(i)})
		}
	}
	sort.Slice(ring, func(a, c int) bool { return ring[a].at < ring[c].at })
	return ring
}
