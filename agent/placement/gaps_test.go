package placement

import "testing"

func TestGapsSayWhenAQuietSessionHasLikelyEnded(t *testing.T) {
	// Sessions of four turns: three pauses of 1-10 s, then the end. A
	// quarter of turn ends are sessions' ends; P(ended | idle t) passes 1/2
	// where the pauses longer than t are a third of all: past about 6 s.
	var g gapQuantiles
	if _, ok := g.likelyEnded(0.5); ok {
		t.Fatal("an answer before any turn end was seen")
	}
	for k := range 400 {
		for p := range 3 {
			g.ended()
			g.add(1 + float64((k*3+p)%10))
		}
		g.ended()
	}
	got, ok := g.likelyEnded(0.5)
	if !ok || got < 5 || got > 10 {
		t.Fatalf("likely ended after %v s (known %v), want between 5 and 10", got, ok)
	}
	if q, _ := g.quantile(0.5); q < 4 || q > 9 { // a bucket's upper edge: over by up to 1.4 times
		t.Fatalf("median pause %v s, want about 5.5 (up to one bucket over)", q)
	}
	// Sessions that never come back: ended as soon as they are quiet.
	var once gapQuantiles
	for range 100 {
		once.ended()
	}
	if got, ok := once.likelyEnded(0.5); !ok || got != 0 {
		t.Fatalf("one-turn sessions: %v %v, want 0 s", got, ok)
	}
}
