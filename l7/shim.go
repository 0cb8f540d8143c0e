package l7

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/lmwarden/lmwarden/agent/placement"
	"github.com/lmwarden/lmwarden/l7/datapath"
	"github.com/lmwarden/lmwarden/l7/http1"
)

// Placer is what the shim needs from the control plane: *placement.Model.
// Admit places a request at once or parks it (cache-capacity admission);
// a parked one is placed by Claim or dropped by Abandon. Every placement
// ends with exactly one Done, unless a Retry failed (it released it).
type Placer interface {
	Name() string
	KeySources() placement.KeySources
	Admit(placement.Request) (placement.Placement, *placement.Wait, error)
	Claim(*placement.Wait, time.Time) (placement.Placement, error)
	Abandon(*placement.Wait, time.Time)
	Retry(placement.Placement, time.Time) (placement.Placement, error)
	Done(placement.Placement, time.Time)
	PlacerReports
}

// PlacerReports is what the shim tells the placer of the exchanges it
// placed, and asks it of the replicas, besides placing.
type PlacerReports interface {
	// BodyArrived: a request placed before its body arrived has it now
	// (placement.Request.BodyPending), and steers placement from here.
	BodyArrived(*placement.Placement)
	// ObserveResponse keeps the time to first byte and duration
	// histograms (lmwarden_*_seconds).
	ObserveResponse(placement.ResponseTiming, time.Time)
	// ObserveAnswered counts the errors the warden answered itself, by
	// code, for the dashboard.
	ObserveAnswered(code int, now time.Time)
	// ReplicaURL names a replica in logs.
	ReplicaURL(replica int) string
	// Healthy is the poller's verdict on a replica: an exchange stalled
	// on an unhealthy one is ended (abort.go).
	Healthy(replica int) bool
	// Replicas is how many replicas the model has: each has byte counts
	// from the start.
	Replicas() int
	// HashSession hashes an id with the model's key: the access log
	// names an agent by it, never by the raw id.
	HashSession(id string) uint64
}

var _ Placer = (*placement.Model)(nil)

// Options tune a Shim. Zero values take the defaults below.
type Options struct {
	// Datapath moves bodies; nil means a new UserPath.
	Datapath datapath.Datapath
	// Upstreams dials and pools replica connections; nil means a new pool
	// built from ConnectTimeout, UpstreamIdleTimeout and MaxIdlePerReplica.
	// Shims of several models may share one.
	Upstreams           *Upstreams
	HeadTimeout         time.Duration // to receive a whole request head (10 s)
	IdleTimeout         time.Duration // keep-alive wait for the next request (120 s)
	BodyTimeout         time.Duration // request body progress, and small writes (60 s)
	ResponseTimeout     time.Duration // response head, then progress of the response body (300 s)
	ConnectTimeout      time.Duration // upstream TCP connect (3 s)
	UpstreamIdleTimeout time.Duration // pooled connection age limit (4 s: under uvicorn's 5 s)
	MaxIdlePerReplica   int           // pooled connections per replica address (32)
	ShutdownTimeout     time.Duration // Close waits this long for requests in flight (30 s)
	RetryAfter          time.Duration // Retry-After of a 503 (1 s)
	// BodyDeadline: a request body must have arrived whole this long after
	// the shim began to forward it (60 s), else 408 and the replica's
	// request is aborted.
	BodyDeadline time.Duration
	// StallGrace: an exchange on a replica the placer marked unhealthy
	// that has sent its client nothing for this long is ended (2 s).
	StallGrace time.Duration
	// DrainGrace: on Close, how long an idle keep-alive connection may
	// still bring its next request (answered with Connection: close)
	// before it is closed cleanly (1 s, at most half of ShutdownTimeout).
	DrainGrace time.Duration
	// Limits bounds client connections (shared by the shims of one
	// daemon); nil: no bound.
	Limits *ConnLimits
	Logger *slog.Logger // nil: slog.Default()
	// AccessLog, if set, gets one info line a request (accesslog.go);
	// nil: no access log.
	AccessLog *slog.Logger
}

func (o *Options) setDefaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.HeadTimeout, 10*time.Second)
	def(&o.IdleTimeout, 120*time.Second)
	def(&o.BodyTimeout, 60*time.Second)
	def(&o.ResponseTimeout, 300*time.Second)
	def(&o.ConnectTimeout, 3*time.Second)
	def(&o.UpstreamIdleTimeout, 4*time.Second)
	def(&o.ShutdownTimeout, 30*time.Second)
	def(&o.RetryAfter, time.Second)
	def(&o.BodyDeadline, 60*time.Second)
	def(&o.StallGrace, 2*time.Second)
	def(&o.DrainGrace, min(time.Second, o.ShutdownTimeout/2))
	if o.Limits == nil {
		o.Limits = NewConnLimits(0, 0)
	}
	if o.MaxIdlePerReplica <= 0 {
		o.MaxIdlePerReplica = 32
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Datapath == nil {
		o.Datapath = defaultDatapath() // l7/kernel_default.go
	}
	if o.Upstreams == nil {
		o.Upstreams = NewUpstreams(o.ConnectTimeout, o.UpstreamIdleTimeout, o.MaxIdlePerReplica)
		if defaultDial != nil {
			o.Upstreams.SetDial(defaultDial)
		}
	}
}

// Errors of Serve and Close.
var (
	ErrShimClosed      = errors.New("l7: shim closed")
	ErrShutdownTimeout = errors.New("l7: requests still in flight at shutdown timeout; connections closed")
)

// Shim is the userspace front of one model: it accepts client connections
// on the model's frontend, reads each request head, asks the model for a
// replica and relays the exchange through its Datapath.
type Shim struct {
	placer Placer
	opts   Options
	dp     datapath.Datapath
	caps   datapath.Capabilities // dp's optional steps
	pool   *Upstreams
	log    *slog.Logger

	closing  atomic.Bool
	mu       sync.Mutex
	lns      map[*net.TCPListener]chan struct{} // closed when its accept loop has ended
	conns    map[*datapath.Conn]*connState
	armed    map[*exchange]struct{} // exchanges a ResponseCarrier may carry
	inflight map[*exchange]struct{} // exchanges placed and not ended (the stall check)
	drainBy  time.Time              // closing: when idle connections stop waiting
	wg       sync.WaitGroup         // one per connection goroutine
	stats    stats

	stallOnce sync.Once
	stallDone chan struct{}
}

// connState is what the shim keeps of a client connection.
type connState struct {
	idle bool        // waiting for a request head
	lim  *limitEntry // its place in the connection bounds
}

// NewShim returns a shim for one model (pass an *placement.Model).
func NewShim(m Placer, opts Options) *Shim {
	opts.setDefaults()
	return &Shim{
		placer: m, opts: opts, dp: opts.Datapath, caps: opts.Datapath.Capabilities(), pool: opts.Upstreams,
		log:       opts.Logger.With("model", m.Name()),
		lns:       map[*net.TCPListener]chan struct{}{},
		conns:     map[*datapath.Conn]*connState{},
		armed:     map[*exchange]struct{}{},
		inflight:  map[*exchange]struct{}{},
		stallDone: make(chan struct{}),
	}
}

// Datapath is the byte mover the shim uses.
func (s *Shim) Datapath() datapath.Datapath { return s.dp }

// Serve accepts connections on ln until Close; it returns ErrShimClosed
// then, or the listener's error. The listener must be plain TCP (see
// Listen), so a kernel datapath can steer its sockets.
func (s *Shim) Serve(ln *net.TCPListener) error {
	s.mu.Lock()
	if s.closing.Load() {
		s.mu.Unlock()
		ln.Close()
		return ErrShimClosed
	}
	done := make(chan struct{})
	s.lns[ln] = done
	s.mu.Unlock()
	defer func() {
		// Gone from lns, so that a later Close does not shut an intake
		// already closed (a listener that failed).
		s.mu.Lock()
		delete(s.lns, ln)
		s.mu.Unlock()
		ln.Close()
		close(done)
	}()
	s.stallOnce.Do(func() { go s.watchStalls(s.stallDone) })
	var backoff time.Duration
	for {
		c, err := ln.AcceptTCP()
		if err != nil {
			if s.closing.Load() {
				// The drain's linger passed (l7/intake.go); whatever is
				// still queued (this loop ran late) is served too.
				for _, c := range acceptQueued(ln, s.log) {
					s.take(c)
				}
				return ErrShimClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, syscall.EMFILE) {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				s.log.Warn("accept failed; backing off", "err", err, "backoff", backoff)
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		if s.closing.Load() {
			// Taken from the queue by the drain: served, and the next
			// queued one may follow.
			_ = ln.SetDeadline(s.lingerDeadline())
		}
		s.take(c)
	}
}

// take admits an accepted connection within the connection bounds and
// serves it, or refuses it with 503.
func (s *Shim) take(c *net.TCPConn) {
	cc := datapath.NewConn(c)
	lim, bound := s.opts.Limits.admit(cc, remoteAddr(c))
	if lim == nil {
		s.wg.Add(1)
		go s.refuse(cc, bound)
		return
	}
	s.mu.Lock()
	s.conns[cc] = &connState{idle: true, lim: lim}
	s.opts.Limits.setPhase(lim, phaseIdle)
	s.wg.Add(1)
	s.mu.Unlock()
	s.stats.conns.Add(1)
	go s.serveConn(cc)
}

// remoteAddr is a connection's client address.
func remoteAddr(c *net.TCPConn) netip.Addr {
	if ta, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		a, _ := netip.AddrFromSlice(ta.IP)
		return a.Unmap()
	}
	return netip.Addr{}
}

// refuse answers a connection beyond the connection bounds with 503 (its
// request unread) and closes it.
func (s *Shim) refuse(c *datapath.Conn, bound int) {
	defer s.wg.Done()
	defer c.Close()
	s.stats.countStatus(503)
	s.log.Debug("connection refused: at the connection bound", "bound", limitNames[bound], "client", c.RemoteAddr().String())
	text := "lmwarden: too many connections (" + limitNames[bound] + " bound); retry shortly\n"
	b := "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\nRetry-After: " +
		strconv.Itoa(int(max(1, s.opts.RetryAfter/time.Second))) + "\r\nContent-Length: " + strconv.Itoa(len(text)) + "\r\n\r\n" + text
	if _, err := c.WriteAll(time.Second, []byte(b)); err != nil {
		return
	}
	_ = c.CloseWrite()
	_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	_, _ = io.CopyN(io.Discard, c.TCPConn, 64<<10)
}

// serveConn serves one client connection request by request; each request
// is routed on its own head.
func (s *Shim) serveConn(c *datapath.Conn) {
	defer func() {
		c.Close()
		s.mu.Lock()
		st := s.conns[c]
		delete(s.conns, c)
		s.mu.Unlock()
		if st != nil {
			s.opts.Limits.release(st.lim)
		}
		s.wg.Done()
	}()
	if cp := s.caps.ConnPreparer; cp != nil {
		cp.PrepareConn(c)
	}
	// The first head: its deadline set under the lock (a drain that began
	// meanwhile bounds it too).
	headDeadline := time.Now().Add(s.opts.HeadTimeout)
	s.setIdle(c, headDeadline)
	for first := true; ; first = false {
		if len(c.Pending) == 0 && !first {
			// Idle keep-alive: wait for the first byte of the next head.
			drain := s.setIdle(c, time.Now().Add(s.opts.IdleTimeout))
			err := s.waitNextHead(c) // kernel datapath hook: capabilities.go
			if !s.setBusy(c) {
				return // shed to make room at a connection bound
			}
			// A connection idle before the drain began had its deadline
			// moved by Close, not by setIdle: closing says so.
			draining := !drain.IsZero() || s.closing.Load()
			if err != nil && !(draining && isTimeout(err) && readable(c)) {
				if draining && isTimeout(err) {
					lingerClose(c) // the drain: closed cleanly, nothing was sent
				}
				return // closed by the client, idle timeout, or shutdown
			}
			// (A request that reached the socket as the drain's wait
			// ended is read and answered with Connection: close: closing
			// would discard it unanswered.)
			headDeadline = time.Now().Add(s.opts.HeadTimeout)
		} else if !first {
			headDeadline = time.Now().Add(s.opts.HeadTimeout)
		}
		if !first {
			s.setReadDeadline(c, headDeadline)
		}
		c.Mark("wake")
		h, rest, err := s.readHead(c, first) // kernel datapath hook: capabilities.go
		if first && !s.setBusy(c) {
			return // shed to make room at a connection bound
		}
		if err != nil {
			if status := http1.HeadErrorStatus(err); status != 0 && !(status == 408 && s.closing.Load() && len(c.Pending) == 0) {
				s.log.Debug("bad request head", "status", status, "err", err)
				s.reject(c, status, nil)
				s.accessBadHead(c, status, headDeadline.Add(-s.opts.HeadTimeout))
			} else if status == 408 {
				lingerClose(c) // drained before it sent a byte
			}
			return
		}
		c.Pending = rest
		c.Mark("head")
		ok := s.exchange(c, h)
		c.Mark("end")
		c.FlushMarks(first)
		if !ok {
			return
		}
	}
}

// setIdle records that c waits for a request head, and sets c's read
// deadline to wait (or, while the shim drains, to the drain's end, and then
// returns that time: zero otherwise): under the lock, so that Close, which
// bounds the idle connections' deadlines under it too, and this never undo
// each other.
func (s *Shim) setIdle(c *datapath.Conn, wait time.Time) (drain time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.conns[c]
	if st == nil {
		return time.Time{}
	}
	st.idle = true
	s.opts.Limits.setPhase(st.lim, phaseIdle)
	if by := s.drainDeadline(); s.closing.Load() && by.Before(wait) {
		wait, drain = by, by
	}
	_ = c.SetReadDeadline(wait)
	return drain
}

// setBusy records that c has a request (its head is in); false means the
// connection bounds closed it while it was idle, to make room.
func (s *Shim) setBusy(c *datapath.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.conns[c]
	if st == nil {
		return true
	}
	st.idle = false
	return s.opts.Limits.setPhase(st.lim, phaseBusy)
}

// drainDeadline is how long, while the shim drains, a connection that
// goes idle now may still bring its next request: until the drain's end,
// and at least DrainGrace from now (a client whose response ended after
// the drain began, and whose head the kernel carried without a
// Connection: close, sends its next request at once). Call with mu.
func (s *Shim) drainDeadline() time.Time {
	if late := time.Now().Add(s.opts.DrainGrace); late.After(s.drainBy) {
		return late
	}
	return s.drainBy
}

// setReadDeadline sets c's read deadline, never past the drain's end.
func (s *Shim) setReadDeadline(c *datapath.Conn, t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if by := s.drainDeadline(); s.closing.Load() && by.Before(t) {
		t = by
	}
	_ = c.SetReadDeadline(t)
}

// Close shuts the shim down gracefully: it stops taking new connections
// and serves the ones the kernel had already queued (l7/intake.go); responses
// from now on say Connection: close; an idle keep-alive connection may
// still bring one request within DrainGrace (a client that sent it as the
// drain began gets its answer, not a reset), after which it is closed
// cleanly (FIN, then its unread input drained: no reset); requests in
// flight may finish for up to ShutdownTimeout, then whatever is left is
// closed (ErrShutdownTimeout), and the idle pool.
func (s *Shim) Close() error {
	s.mu.Lock()
	s.drainBy = time.Now().Add(s.opts.DrainGrace) // before closing: the accept loops read it then
	s.closing.Store(true)
	intakes := make([]chan struct{}, 0, len(s.lns))
	for ln, done := range s.lns {
		s.shutIntake(ln)
		intakes = append(intakes, done)
	}
	s.stallOnce.Do(func() {}) // no watcher starts after this
	select {
	case <-s.stallDone:
	default:
		close(s.stallDone)
	}
	s.mu.Unlock()
	// Every connection the listeners had queued is accepted (and counted
	// in wg) before the wait below begins.
	for _, done := range intakes {
		<-done
	}
	s.mu.Lock()
	armed := make([]*exchange, 0, len(s.armed))
	for x := range s.armed {
		armed = append(armed, x)
	}
	s.mu.Unlock()
	// Responses a kernel datapath would carry with the replica's head as
	// it is go through the shim instead, which says Connection: close
	// (unless they began: those end, then the connection closes). First,
	// so that a client sees its idle connection close only after.
	var dis sync.WaitGroup
	for _, x := range armed {
		dis.Go(func() { s.caps.Carrier.Disarm(&x.Exchange) })
	}
	dis.Wait()
	s.mu.Lock()
	for c, st := range s.conns {
		if st.idle {
			_ = c.SetReadDeadline(s.drainBy) // its goroutine closes it cleanly then
		}
	}
	s.mu.Unlock()

	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-time.After(s.opts.ShutdownTimeout):
		err = ErrShutdownTimeout
		s.mu.Lock()
		for c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
		<-done
	}
	s.pool.Close()
	return err
}

// Listen opens a plain-TCP listener (no MPTCP: a kernel datapath must be
// able to put its sockets into a sockmap).
func Listen(addr string) (*net.TCPListener, error) {
	var lc net.ListenConfig
	lc.SetMultipathTCP(false)
	ln, err := lc.Listen(context.Background(), "tcp", addr)
	if err != nil {
		return nil, err
	}
	return ln.(*net.TCPListener), nil
}

// Stats are the shim's own counters.
type Stats struct {
	Connections uint64            // accepted client connections
	Requests    uint64            // request heads read and placed or refused by placement
	Retries     uint64            // connect failures moved to another replica
	Replays     uint64            // requests sent again on a new connection after a pooled one closed unanswered
	Parked      uint64            // requests that waited for admission
	Answered    map[int]uint64    // statuses the shim answered itself (400, 408, 431, 502, 503, 504, 505)
	Abandoned   map[string]uint64 // requests whose client left, by where they stood: body, parked, response
	// BodyKeys counts the requests without a session id by what their
	// body's start gave (bodyKeyOutcomes: keyed, short, none).
	BodyKeys [numBodyKeyOutcomes]uint64
}

// What the body's start gave a request without a session id.
const (
	bodyKeyed = iota // a start was read: the conversation's key
	bodyShort        // the start lay beyond the bytes that came with the head
	bodyNone         // no start: not a chat request with a Content-Length, or body_key off
	numBodyKeyOutcomes
)

var bodyKeyOutcomes = [numBodyKeyOutcomes]string{"keyed", "short", "none"}

type stats struct {
	conns, requests, retries, replays, parked atomic.Uint64
	abandoned                                 [len(abandonedStages)]atomic.Uint64
	bodyKeys                                  [numBodyKeyOutcomes]atomic.Uint64
	mu                                        sync.Mutex
	answered                                  map[int]uint64
}

// countKey counts what a request without a session id had of a body key.
func (s *Shim) countKey(k RoutingKey) {
	switch {
	case k.SessionID != "":
	case k.BodyStart != nil:
		s.stats.bodyKeys[bodyKeyed].Add(1)
	case k.BodyShort:
		s.stats.bodyKeys[bodyShort].Add(1)
	default:
		s.stats.bodyKeys[bodyNone].Add(1)
	}
}

// Where a request stood when its client left (lmwarden_shim_abandoned_total).
const (
	abandonedBody     = iota // before its request body arrived whole
	abandonedParked          // while it waited for admission
	abandonedResponse        // before its response ended
)

var abandonedStages = [...]string{"body", "parked", "response"}

func (st *stats) countAbandoned(stage int) { st.abandoned[stage].Add(1) }

// stageOf is where an exchange that ended with errClientGone stood.
func stageOf(err error) int {
	if errors.Is(err, errBodyAbandoned) {
		return abandonedBody
	}
	return abandonedResponse
}

func (st *stats) countStatus(code int) {
	st.mu.Lock()
	if st.answered == nil {
		st.answered = map[int]uint64{}
	}
	st.answered[code]++
	st.mu.Unlock()
}

// Stats returns a snapshot of the counters.
func (s *Shim) Stats() Stats {
	out := Stats{
		Connections: s.stats.conns.Load(),
		Requests:    s.stats.requests.Load(),
		Retries:     s.stats.retries.Load(),
		Replays:     s.stats.replays.Load(),
		Parked:      s.stats.parked.Load(),
		Answered:    map[int]uint64{},
		Abandoned:   map[string]uint64{},
	}
	for i, name := range abandonedStages {
		out.Abandoned[name] = s.stats.abandoned[i].Load()
	}
	for i := range out.BodyKeys {
		out.BodyKeys[i] = s.stats.bodyKeys[i].Load()
	}
	s.stats.mu.Lock()
	for k, v := range s.stats.answered {
		out.Answered[k] = v
	}
	s.stats.mu.Unlock()
	return out
}

var _ io.Closer = (*Shim)(nil)
