package kernel

import (
	"errors"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lmwarden/lmwarden/l7/datapath"
	"github.com/lmwarden/lmwarden/maps"
)

// maxSlots is the lmw_stats map's size (LMW_MAX_REPLICAS).
const maxSlots = 256

var errKernelSlots = errors.New("kernel datapath: more than 256 replicas")

// counters gives each replica a slot in lmw_stats (the kernel's counters
// of it) and keeps the bytes the shim moved itself for it.
type counters struct {
	st *maps.State
	// fallbacks counts the msg path's responses whose end went missing
	// (msg_fallback.go); nil on skb.
	fallbacks func() uint64
	mu        sync.Mutex
	slots     map[datapath.ReplicaKey]uint32
	user      map[datapath.ReplicaKey]*byteCounters
	next      uint32 // the next free slot (a forgotten one is not used again)
}

type byteCounters struct{ up, down atomic.Uint64 }

func newCounters(st *maps.State) counters {
	return counters{st: st, slots: map[datapath.ReplicaKey]uint32{}, user: map[datapath.ReplicaKey]*byteCounters{}}
}

// slot is the stats index of the exchange's replica.
func (c *counters) slot(x *datapath.Exchange) (uint32, *byteCounters, error) {
	key := datapath.ReplicaKey{Model: x.Model, Replica: x.Replica}
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.slots[key]
	if !ok {
		if c.next >= maxSlots {
			return 0, nil, errKernelSlots
		}
		s = c.next
		c.next++
		c.slots[key] = s
		c.user[key] = &byteCounters{}
	}
	return s, c.user[key], nil
}

// ForgetModel drops the counters of model's replicas from Counts and the
// metrics: the self-test's, which are not a served model's.
func (c *counters) ForgetModel(model string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for key := range c.slots {
		if key.Model == model {
			delete(c.slots, key)
			delete(c.user, key)
		}
	}
}

// Counts are one replica's counters in a kernel datapath.
type Counts struct {
	Requests, Responses uint64 // responses the kernel started carrying, and whose end it found
	KernelBytes         uint64 // bytes redirected socket to socket
	PassedBytes         uint64 // bytes the kernel handed to the shim (heads, fallbacks)
	UserUp, UserDown    uint64 // body bytes the shim forwarded itself
}

// Counts returns the counters per replica.
func (c *counters) Counts() map[datapath.ReplicaKey]Counts {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[datapath.ReplicaKey]Counts, len(c.slots))
	for key, s := range c.slots {
		st, _ := c.st.Stats(s)
		u := c.user[key]
		out[key] = Counts{Requests: st.Requests, Responses: st.Responses,
			KernelBytes: st.BytesKernel, PassedBytes: st.BytesUser,
			UserUp: u.up.Load(), UserDown: u.down.Load()}
	}
	return out
}

// Share sums the counters: bytes carried in the kernel, and bytes that
// crossed userspace (passed to the shim, or forwarded by it).
func Share(counts map[datapath.ReplicaKey]Counts) (kernel, user uint64) {
	for _, c := range counts {
		kernel += c.KernelBytes
		user += c.PassedBytes + c.UserUp + c.UserDown
	}
	return kernel, user
}

// The kernel datapaths' metrics.
var (
	descKernelBytes = prometheus.NewDesc("lmwarden_kernel_bytes_total",
		"Bytes of the kernel datapath per replica by where they crossed: kernel (redirected socket to socket), passed (handed to the shim by the kernel: heads, fallbacks), user_up and user_down (body bytes the shim forwarded itself).",
		[]string{"model", "replica", "path"}, nil)
	descKernelResponses = prometheus.NewDesc("lmwarden_kernel_responses_total",
		"Responses the kernel datapath carried (started) and whose end the kernel found (ended).",
		[]string{"model", "replica", "event"}, nil)
	descDispatch = prometheus.NewDesc("lmwarden_kernel_dispatch_total",
		"What the dispatch program (sk_lookup) decided for TCP connection attempts: lookups (all it saw), own (the warden's own connections, left alone), miss (no frontend there), no_listener (the shim gone: failed open), assigned (steered to the shim), failed_assign (failed open).",
		[]string{"outcome"}, nil)
	descJoins = prometheus.NewDesc("lmwarden_kernel_socket_joins_total",
		"Sockets the sk_msg datapath's sock_ops program (lmw_pair) put into its maps during their handshake: socket=replica (a replica's end of a warden upstream connection, paired) or client (a client's connection to a frontend), outcome=joined or failed (a map full). Zero on sk_skb.",
		[]string{"socket", "outcome"}, nil)
	descFallbacks = prometheus.NewDesc("lmwarden_datapath_fallbacks_total",
		"Responses the msg datapath's kernel carried to their end whose last byte never reached the shim; the first made the warden stop handing responses to the kernel (lmwarden_datapath_info says why).",
		nil, nil)
)

// collector exports a datapath's counters (Describe/Collect).
type collector struct{ c *counters }

func (k collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descKernelBytes
	ch <- descKernelResponses
	ch <- descDispatch
	ch <- descJoins
	if k.c.fallbacks != nil {
		ch <- descFallbacks
	}
}

func (k collector) Collect(ch chan<- prometheus.Metric) {
	for key, c := range k.c.Counts() {
		r := strconv.Itoa(key.Replica)
		for path, v := range map[string]uint64{"kernel": c.KernelBytes, "passed": c.PassedBytes, "user_up": c.UserUp, "user_down": c.UserDown} {
			ch <- prometheus.MustNewConstMetric(descKernelBytes, prometheus.CounterValue, float64(v), key.Model, r, path)
		}
		ch <- prometheus.MustNewConstMetric(descKernelResponses, prometheus.CounterValue, float64(c.Requests), key.Model, r, "started")
		ch <- prometheus.MustNewConstMetric(descKernelResponses, prometheus.CounterValue, float64(c.Responses), key.Model, r, "ended")
	}
	if ds, err := k.c.st.DispatchStats(); err == nil {
		for outcome, v := range map[string]uint64{"lookups": ds.Lookups, "own": ds.Own, "miss": ds.Misses,
			"no_listener": ds.NoListener, "assigned": ds.Assigned, "failed_assign": ds.FailedAssigns} {
			ch <- prometheus.MustNewConstMetric(descDispatch, prometheus.CounterValue, float64(v), outcome)
		}
	}
	if k.c.fallbacks != nil {
		ch <- prometheus.MustNewConstMetric(descFallbacks, prometheus.CounterValue, float64(k.c.fallbacks()))
	}
	if ps, err := k.c.st.PairStats(); err == nil {
		ch <- prometheus.MustNewConstMetric(descJoins, prometheus.CounterValue, float64(ps.Paired), "replica", "joined")
		ch <- prometheus.MustNewConstMetric(descJoins, prometheus.CounterValue, float64(ps.Failed), "replica", "failed")
		ch <- prometheus.MustNewConstMetric(descJoins, prometheus.CounterValue, float64(ps.Client), "client", "joined")
		ch <- prometheus.MustNewConstMetric(descJoins, prometheus.CounterValue, float64(ps.ClientFailed), "client", "failed")
	}
}
