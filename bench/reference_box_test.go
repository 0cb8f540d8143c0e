package bench

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"
)

// The reference box's published rows (docs/sim.md, "The reference box, row
// by row"): four RTX A4000s, Qwen3-4B, vLLM 0.26, affinity off then on.
// Each pair is off, on.
type referenceRow struct {
	sessions             int
	tokPerMin, p50, p95  [2]float64
	busy, hitRatePercent [2]float64
}

var referenceRows = []referenceRow{
	{4, [2]float64{5886, 6744}, [2]float64{2.05, 0.38}, [2]float64{3.5, 2.84}, [2]float64{2.71, 2.83}, [2]float64{56.2, 86.4}},
	{8, [2]float64{8364, 10752}, [2]float64{2.33, 0.48}, [2]float64{6.32, 5.03}, [2]float64{3.74, 3.74}, [2]float64{44.3, 86.1}},
	{24, [2]float64{9048, 11178}, [2]float64{5.06, 13.14}, [2]float64{58.82, 38.34}, [2]float64{3.91, 4}, [2]float64{32.8, 37.9}},
	{32, [2]float64{14760, 16638}, [2]float64{12.32, 27.66}, [2]float64{82.84, 38.92}, [2]float64{4, 4}, [2]float64{31.6, 31.6}},
}

// The cells the simulator does not reproduce, each for the physical reason
// docs/sim.md gives ("What the simulator does not reproduce, and why"):
// the reference's output at 32 sessions is more than the cards' peaks allow
// at its hit rate (and 1.84x its own 24-session output off, more than two
// 1.3x bands span), its pinned arm placed four sessions on fewer than four
// replicas, and its off arm's queues were as uneven within 3 minutes as
// the simulator's round robin per API server, neutral at saturation, makes
// them only after 6-10 minutes (the off arm's tail, and with it its median
// at 24).
var referenceMisses = map[string]bool{
	"32 off tok/min": true, "32 on tok/min": true,
	"4 on busy":  true,
	"24 off p95": true, "32 off p95": true, "24 off p50": true,
}

// TestReferenceBoxRows holds the simulator's defaults to the reference
// box's published rows within the bands of docs/sim.md: prefix hits within
// 6 points, time to first token within 2x, output tokens a minute within
// 1.3x, replicas busy within 0.3; the mean of three seeds, because a
// 3-minute window of vLLM 0.26's counters, which count every look-up of a
// waiting request, moves by several points from seed to seed. The overload
// median is held too: worse with affinity at 24 and 32 sessions.
func TestReferenceBoxRows(t *testing.T) {
	p := mustProfile(t, "a4000-qwen3-4b")
	arms := mustArms(t, "off,on")
	type key struct {
		n   int
		arm string
	}
	sum := map[key]*[5]float64{}
	seeds := []uint64{1, 2, 3}
	for _, seed := range seeds {
		rep, err := RunVirtual(context.Background(), VirtualConfig{
			Profile: p, Replicas: 4, Steps: Sessions(4, 8, 16, 24, 32), Duration: 3 * time.Minute,
			Arms: arms, LBStats: p.LBStats(), Seed: seed,
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, row := range referenceRows {
			for _, arm := range []string{"off", "on"} {
				r, ok := rep.Find(row.sessions, arm)
				if !ok {
					t.Fatalf("no result for %d sessions, arm %s", row.sessions, arm)
				}
				k := key{row.sessions, arm}
				if sum[k] == nil {
					sum[k] = &[5]float64{}
				}
				for i, v := range []Num{r.OutputTokensPerMin, r.TTFTP50, r.TTFTP95, r.ReplicasBusy, r.HitRate * 100} {
					sum[k][i] += float64(v) / float64(len(seeds))
				}
			}
		}
	}
	for _, row := range referenceRows {
		for a, arm := range []string{"off", "on"} {
			got := sum[key{row.sessions, arm}]
			checks := []struct {
				what     string
				got, box float64
				ok       bool
			}{
				{"tok/min", got[0], row.tokPerMin[a], within(got[0]/row.tokPerMin[a], 1/1.3, 1.3)},
				{"p50", got[1], row.p50[a], within(got[1]/row.p50[a], 0.5, 2)},
				{"p95", got[2], row.p95[a], within(got[2]/row.p95[a], 0.5, 2)},
				{"busy", got[3], row.busy[a], math.Abs(got[3]-row.busy[a]) <= 0.3},
				{"hit", got[4], row.hitRatePercent[a], math.Abs(got[4]-row.hitRatePercent[a]) <= 6},
			}
			for _, c := range checks {
				name := fmt.Sprintf("%d %s %s", row.sessions, arm, c.what)
				t.Logf("%-16s simulated %8.2f, measured %8.2f", name, c.got, c.box)
				if !c.ok && !referenceMisses[name] {
					t.Errorf("%s: simulated %.2f, the reference measured %.2f: outside the band", name, c.got, c.box)
				}
			}
		}
	}
	for _, n := range []int{24, 32} {
		off, on := sum[key{n, "off"}], sum[key{n, "on"}]
		if !(on[1] > off[1]) {
			t.Errorf("%d sessions: median TTFT %.1f s with affinity, %.1f s without: the reference's median is worse with affinity", n, on[1], off[1])
		}
	}
}

func within(x, lo, hi float64) bool { return x >= lo && x <= hi }
