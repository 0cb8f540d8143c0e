package placement

import (
	"math/rand/v2"
	"testing"
	"time"
)

// The open-addressing table against a Go map as the reference: random
// inserts, lookups, removals (including wrapped probe runs, forced by a
// small table and clustered hashes) and sweeps must agree.
func TestSessionTableAgreesWithAMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	tab := newSessionTable(4, time.Hour, nil)
	ref := map[uint64]int{}
	hashOf := func() uint64 {
		// few distinct low bits: long probe runs that wrap around the end
		return uint64(rng.IntN(1<<20))<<20 | uint64(rng.IntN(8)) | 1
	}
	check := func() {
		t.Helper()
		if tab.len() != len(ref) {
			t.Fatalf("count %d, reference %d", tab.len(), len(ref))
		}
		pinned := 0
		for _, n := range tab.pinned {
			pinned += n
		}
		if pinned != len(ref) {
			t.Fatalf("pinned sum %d, reference %d", pinned, len(ref))
		}
		for h, r := range ref {
			i := tab.find(h)
			if i < 0 || int(tab.slots[i].replica) != r {
				t.Fatalf("hash %x: slot %d", h, i)
			}
		}
	}
	var keys []uint64
	for step := range 20000 {
		switch op := rng.IntN(10); {
		case op < 6:
			h := hashOf()
			if _, ok := ref[h]; ok || tab.find(h) >= 0 {
				continue
			}
			r := rng.IntN(4)
			tab.insert(h, r, 0)
			ref[h] = r
			keys = append(keys, h)
		case op < 9 && len(keys) > 0:
			k := rng.IntN(len(keys))
			h := keys[k]
			keys[k] = keys[len(keys)-1]
			keys = keys[:len(keys)-1]
			if i := tab.find(h); i >= 0 {
				tab.remove(i)
			}
			delete(ref, h)
		default:
			if tab.find(hashOf()|1<<63) >= 0 {
				t.Fatal("found a hash never inserted")
			}
		}
		if step%500 == 0 {
			check()
		}
	}
	check()
	// Everything expires in one full sweep.
	n := tab.sweep(int64(2*time.Hour), len(tab.slots)+tab.len())
	if n != len(ref) || tab.len() != 0 {
		t.Fatalf("swept %d of %d, %d left", n, len(ref), tab.len())
	}
}
