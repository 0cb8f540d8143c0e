package placement

import (
	"fmt"
	"testing"
	"time"

	"github.com/lmwarden/lmwarden/agent/config"
)

func TestForgedHugeContentLengthCannotTakeAReplicaOutOfPlacement(t *testing.T) {
	m := mustCostModel(t, config.PolicyCost, 40_000)
	// A client announces 10^18 bytes of prompt and leaves without sending
	// them: booked at face value, that replica's predicted backlog would
	// take longer than the age of the universe to drain.
	forged := mustPlace(t, m, Request{SessionID: "forged", PromptBytes: 999_999_999_999_999_999, Now: costEpoch})
	m.Done(forged, costEpoch.Add(time.Second))
	now := costEpoch.Add(time.Minute)
	seen := map[int]bool{}
	for k := range 4 {
		p := mustPlace(t, m, Request{SessionID: fmt.Sprint("s", k), PromptBytes: promptBytes(11_000), Now: now})
		seen[p.Replica] = true
	}
	if len(seen) != 4 {
		t.Fatalf("four new sessions a minute later landed on %d replicas, want 4 (replica %d shunned)", len(seen), forged.Replica)
	}
}
