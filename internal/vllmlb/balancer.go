// Package vllmlb is a model of vLLM's own data-parallel balancer, the one a
// deployment has when affinity is off: the agent's policy vllm-lb runs it
// in the per-replica shape, and the simulator runs it behind one endpoint in
// the ranks shape. It lives apart from both so that the production daemon's
// decisions never depend on the simulator (docs/architecture.md).
//
// What it models, from vLLM 0.26's code (docs/sim.md, "vLLM's balancer"):
//
//   - `vllm serve --data-parallel-size N` starts N API-server processes by
//     default (vllm/entrypoints/cli/serve.py: api_server_count defaults to
//     data_parallel_size in the internal-LB mode). They share the listening
//     port with SO_REUSEPORT, so the kernel hands each new connection to one
//     of them by a hash of its addresses: for clients that open a connection
//     a request, a uniform draw.
//   - Each API server balances on its own (DPLBAsyncMPClient in
//     vllm/v1/engine/core_client.py): the rank with the lowest
//     4·waiting + running in its copy of the counts, scanned from a start
//     index (rank·i/N for server i) that moves one on after every decision
//     (pull request 47420), strict < so the first scanned wins a tie; the
//     chosen rank's waiting count is then bumped by the number of API
//     servers until the next publish replaces every copy.
//   - The DP coordinator (vllm/v1/engine/coordinator.py) publishes the
//     engines' counts every 100 ms while they change and every 5 s
//     otherwise. Engines of a dense model run EngineCoreProc, which never
//     sends its counts (pull request 30739 moved dense models there; 49204,
//     after 0.26, restored the counts): the coordinator keeps publishing
//     zeros every 5 s and only the local bumps remain, a round robin per
//     API server.
package vllmlb

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/lmwarden/lmwarden/internal/least"
)

// ErrBadStatsMode is returned by ParseStatsMode for an unknown spelling.
var ErrBadStatsMode = errors.New("vllmlb: unknown lb-stats mode")

// StatsMode selects how current the queue stats behind the balancer are
// (docs/architecture.md, "Affinity off"): vLLM's coordinator publishes
// every rank's counts every 100 ms, some releases publish them late, and
// some (dense models, vLLM 0.22 to 0.26) not at all.
type StatsMode int

const (
	// Fresh: the coordinator publishes every rank's waiting and
	// running counts every 100 ms (MoE models, and dense models from the
	// release after 0.26).
	Fresh StatsMode = iota
	// Stale: the published counts lag by StaleLag.
	Stale
	// None: no queue stats are published (dense models in vLLM 0.22 to
	// 0.26): the coordinator republishes zeros every ZeroRepublish, and
	// between them only the local bumps remain, a round robin per API
	// server.
	None
)

// Timing of the coordinator's stats.
const (
	PublishInterval = 100 * time.Millisecond
	StaleLag        = time.Second
	// ZeroRepublish is how often the coordinator publishes counts that
	// have not changed (coordinator.py: 5 s); with no stats from the
	// engines they are all zero, and each publish wipes the local bumps.
	ZeroRepublish = 5 * time.Second
)

// String is the flag spelling.
func (m StatsMode) String() string {
	switch m {
	case Fresh:
		return "fresh"
	case Stale:
		return "stale"
	case None:
		return "none"
	}
	return fmt.Sprintf("StatsMode(%d)", int(m))
}

// ParseStatsMode reads "fresh", "stale" or "none"; "" is fresh.
func ParseStatsMode(s string) (StatsMode, error) {
	switch s {
	case "", "fresh":
		return Fresh, nil
	case "stale":
		return Stale, nil
	case "none":
		return None, nil
	}
	return 0, fmt.Errorf("%w: %q (want fresh, stale or none)", ErrBadStatsMode, s)
}

// Balancer is vLLM's data-parallel balancer: one copy of the counts and one
// rotating start per API server, a uniform draw of the API server for each
// request. Not safe for concurrent use; callers hold their own lock.
type Balancer struct {
	mode    StatsMode
	ranks   int
	servers []*frontend
	pickFE  *rand.Rand // which API server the kernel hands a connection to

	nextPublish time.Time
	history     []sample // Stale: samples not yet old enough
}

// frontend is one API server's DPLBAsyncMPClient.
type frontend struct {
	waiting, running []int // counts as it believes them (published + local bumps)
	start            int
}

type sample struct {
	at               time.Time
	waiting, running []int
}

// New returns a balancer over ranks ranks behind as many API servers,
// vLLM's default; seed drives which API server each request meets.
func New(ranks int, mode StatsMode, seed uint64) *Balancer {
	return NewWithServers(ranks, ranks, mode, seed)
}

// NewWithServers is New with another API-server count (vLLM's
// --api-server-count); servers < 1 is one.
func NewWithServers(ranks, servers int, mode StatsMode, seed uint64) *Balancer {
	servers = max(servers, 1)
	b := &Balancer{mode: mode, ranks: ranks, pickFE: rand.New(rand.NewPCG(seed, 0x0a91_5e7e_0000_0001))}
	for i := range servers {
		fe := &frontend{waiting: make([]int, ranks), running: make([]int, ranks)}
		if ranks > 0 {
			fe.start = ranks * i / servers
		}
		b.servers = append(b.servers, fe)
	}
	return b
}

// Mode is the stats mode the balancer was made with.
func (b *Balancer) Mode() StatsMode { return b.mode }

// Servers is the number of API servers.
func (b *Balancer) Servers() int { return len(b.servers) }

// Observe offers the ranks' current counts, as the engines report them to the
// coordinator. Call it as often as convenient (every decision is fine): the
// balancer applies a publish at most every PublishInterval, StaleLag old
// in Stale; in None the engines send nothing and the coordinator's zeros
// are applied every ZeroRepublish.
func (b *Balancer) Observe(now time.Time, waiting, running []int) {
	if now.Before(b.nextPublish) {
		return
	}
	switch b.mode {
	case None:
		b.nextPublish = now.Add(ZeroRepublish)
		b.publish(nil, nil)
	case Fresh:
		b.nextPublish = now.Add(PublishInterval)
		b.publish(waiting, running)
	case Stale:
		b.nextPublish = now.Add(PublishInterval)
		b.history = append(b.history, sample{
			at:      now,
			waiting: append([]int(nil), waiting...),
			running: append([]int(nil), running...),
		})
		// apply the newest sample that is at least StaleLag old
		k := -1
		for i, s := range b.history {
			if now.Sub(s.at) >= StaleLag {
				k = i
			}
		}
		if k >= 0 {
			b.publish(b.history[k].waiting, b.history[k].running)
			b.history = append(b.history[:0], b.history[k+1:]...)
		}
	}
}

// publish replaces every API server's counts (nil: zeros).
func (b *Balancer) publish(waiting, running []int) {
	for _, fe := range b.servers {
		if waiting == nil {
			clear(fe.waiting)
			clear(fe.running)
			continue
		}
		copy(fe.waiting, waiting)
		copy(fe.running, running)
	}
}

// Pick routes one request (a new connection) among eligible ranks (nil:
// all): the kernel draws its API server, which returns its rank with the
// lowest waiting*4+running, the first found scanning from its rotating
// start, and bumps that rank's waiting count by the number of API servers.
// -1 when no rank is eligible.
func (b *Balancer) Pick(now time.Time, eligible func(rank int) bool) int {
	if b.mode == None {
		b.Observe(now, nil, nil) // the coordinator's zeros arrive on their own
	}
	fe := b.servers[0]
	if len(b.servers) > 1 {
		fe = b.servers[b.pickFE.IntN(len(b.servers))]
	}
	best := least.By(&fe.start, b.ranks, func(r int) (int, bool) {
		return fe.waiting[r]*4 + fe.running[r], eligible == nil || eligible(r)
	})
	if best >= 0 {
		fe.waiting[best] += len(b.servers)
	}
	return best
}

// Counts returns the counts the first API server currently believes (for
// tests and the admin view).
func (b *Balancer) Counts() (waiting, running []int) {
	fe := b.servers[0]
	return append([]int(nil), fe.waiting...), append([]int(nil), fe.running...)
}
