package placement

import (
	"math"

	"github.com/lmwarden/lmwarden/agent/config"
)

// Admission in mode auto (the default) parks only while the replicas are
// overloaded. Its measure is the live load: the context of the live
// sessions (the shared prefix once a replica, those idle so long that
// they have likely ended left out) and of the requests waiting at the
// warden, over the healthy replicas' capacity (fill applied), averaged
// with a time constant of loadWindow so that a burst of first turns or a
// few sessions more for a moment do not switch it. Admission engages when
// the average passes engageAt and lets go once it is back under
// disengageAt with nobody waiting: the band between the two is the
// hysteresis. engageAt is above 1 because LRU copes with a little
// overflow (it evicts a few blocks of the session idle longest, which
// costs less than making a session wait): measured, admission starts to
// pay between 16 and 18 sessions on four A4000s, where the live load is
// 1.1 to 1.2 (docs/placement.md).
var (
	engageAt    = 1.2
	disengageAt = 1.0
)

// loadWindow is the time constant of the live load's average.
const loadWindow = 60e9 // ns

// liveLoad is the live load now (above); call with m.mu held.
func (m *Model) liveLoad(now int64) float64 {
	a := &m.peer.admission
	ended, known := m.peer.gaps.likelyEnded(likelyEndedShare)
	var live, caps float64
	for i := range m.reps {
		if !m.reps[i].healthy {
			continue
		}
		live += m.physical(i)
		caps += a.cfg.Fill * m.capacity(i)
		if !known {
			continue
		}
		for _, s := range m.peer.reps[i].holders {
			if s.inflight == 0 && float64(now-max(s.lastEnd, s.lastPlace))/1e9 >= ended {
				live -= s.live - m.peer.sharedPrefix
			}
		}
	}
	for _, w := range a.parked {
		live += w.prompt + outputAllowance - m.peer.sharedPrefix
	}
	if caps <= 0 {
		return 0
	}
	return live / caps
}

// updateEngaged folds the live load into its average and switches
// admission in mode auto on or off; call with m.mu held.
func (m *Model) updateEngaged(now int64) {
	a := &m.peer.admission
	load := m.liveLoad(now)
	if a.loadAt == 0 || now <= a.loadAt {
		if a.loadAt == 0 {
			a.loadAvg, a.loadAt = load, now
		}
	} else {
		k := 1 - math.Exp(-float64(now-a.loadAt)/loadWindow)
		a.loadAvg += k * (load - a.loadAvg)
		a.loadAt = now
	}
	if a.cfg.Mode != config.AdmissionAuto {
		return
	}
	switch {
	case !a.engaged && a.loadAvg > engageAt:
		a.engaged, a.engagedSince = true, now
		a.switches++
	case a.engaged && a.loadAvg < disengageAt && len(a.parked) == 0:
		a.engaged = false
	}
}
