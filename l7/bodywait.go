package l7

import (
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lmwarden/lmwarden/l7/datapath"
	"github.com/lmwarden/lmwarden/l7/http1"
)

// A request whose body has not arrived with its head waits for it in the
// client's socket before the shim places it, holding nothing but that
// socket: no replica connection, no splice pipe, no place in a replica's
// queue. Connected first, a request that announces a body and sends one
// byte of it held four descriptors (its socket, a replica connection, a
// two-descriptor pipe) and a connection of the replica's for the whole
// body deadline: a few thousand of them ran the warden out of
// descriptors below its connection bound, and would have done the same
// to the replica. Waiting, it holds one descriptor, and the connection
// bounds may end it to make room (limits.go).
//
// The wait costs nothing while it waits: the socket's SO_RCVLOWAT is set
// to the bytes the request still needs, so the kernel wakes the shim once
// they are all there (or once the receive window is full, or the client
// closes), not for every segment. Then the body goes out in one splice
// from a full queue. At most bodyWaitBytes are waited for: a larger body
// streams from there, its client having shown it sends.

// bodyWaitBytes bounds how much of a request body the kernel holds in the
// client's socket while the shim waits for it.
const bodyWaitBytes = 256 << 10

// Throttle of a chunked body's checks: its end cannot be told from a byte
// count, so each arrival is looked at (a peek and a parse of what is
// queued), at most once every chunkCheckMin at first, backing off to
// chunkCheckMax while the body keeps trickling.
const (
	chunkCheckMin = time.Millisecond
	chunkCheckMax = 200 * time.Millisecond
)

// bodyWait says how a request's wait for its body ended.
type bodyWait int

const (
	bodyHere      bodyWait = iota // whole, in the socket or in hand
	bodyStreams                   // bodyWaitBytes of it in the socket (or the datapath's queue): the rest streams
	bodyLate                      // the body deadline passed: 408
	bodyAbandoned                 // the client closed or reset before it came whole
	bodyShed                      // ended to make room at a connection bound: 503
)

// errBodyAbandoned: the client closed its connection before its request
// body arrived whole (its leaving, not the replica's failure).
var errBodyAbandoned = errors.New("l7: the client closed before its request body arrived")

// awaitBody waits until the body of h, read from c, is in c's socket,
// until deadline at most. A 100-continue client is told to send it first.
func (s *Shim) awaitBody(c *datapath.Conn, h *http1.Head, deadline time.Time) bodyWait {
	q := queuedBody{head: h, pending: c.Pending}
	if q.whole() {
		return bodyHere
	}
	if qr := s.caps.Queued; qr != nil {
		var taken bool
		if q.prefix, taken = qr.QueuedHead(c); taken {
			return bodyStreams // the datapath's queue: the relay waits as before
		}
	}
	rc, err := c.SyscallConn()
	if err != nil {
		return bodyAbandoned
	}
	if h.ExpectContinue {
		// The shim is ready for the body now; it never sends a second one.
		h.ExpectContinue = false
		if _, err := c.WriteAll(s.opts.BodyTimeout, []byte("HTTP/1.1 100 Continue\r\n\r\n")); err != nil {
			return bodyAbandoned
		}
	}
	_ = c.SetReadDeadline(deadline)
	lim := s.limitEntry(c)
	s.opts.Limits.setPhase(lim, phaseBody)
	end := q.wait(rc)
	if !s.opts.Limits.setPhase(lim, phaseBusy) {
		end = bodyShed
	}
	_ = rc.Control(func(fd uintptr) { _ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVLOWAT, 1) })
	_ = c.SetReadDeadline(time.Time{})
	return end
}

// limitEntry is c's place in the connection bounds (nil: none).
func (s *Shim) limitEntry(c *datapath.Conn) *limitEntry {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.conns[c]; st != nil {
		return st.lim
	}
	return nil
}

// queuedBody is what the shim knows of a request body it waits for: the
// head, the body bytes read with it (pending), and how many bytes of the
// head are still in the socket ahead of the body (prefix).
type queuedBody struct {
	head    *http1.Head
	pending []byte
	prefix  int
}

// whole reports a body the shim already holds (or none).
func (q *queuedBody) whole() bool {
	switch q.head.Framing {
	case http1.FramingLength:
		return int64(len(q.pending)) >= q.head.ContentLength
	case http1.FramingChunked:
		var p http1.ChunkedBody
		_, err := p.Feed(q.pending)
		return err != nil || p.Done() // a broken one is the relay's to answer
	}
	return true
}

// wait waits for the body in the socket behind rc (a deadline set on it).
func (q *queuedBody) wait(rc interface {
	Control(func(uintptr)) error
	Read(func(uintptr) bool) error
}) bodyWait {
	chunked := q.head.Framing == http1.FramingChunked
	// The mark: the bytes the queue must hold before the kernel wakes the
	// shim. Set once to all the shim waits for, it also grows the socket's
	// receive buffer to hold them (Linux sizes it for SO_RCVLOWAT); a
	// chunked body's end is looked for at each arrival after that.
	target := q.prefix + int(min(q.head.ContentLength-int64(len(q.pending)), bodyWaitBytes))
	if chunked {
		target = q.prefix + bodyWaitBytes
	}
	setMark := func(n int) {
		_ = rc.Control(func(fd uintptr) { _ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVLOWAT, n) })
	}
	setMark(target)
	backoff, queued := chunkCheckMin, -1
	for woke := false; ; woke = true {
		var st queueState
		_ = rc.Control(func(fd uintptr) { st = q.check(int(fd), target) })
		switch {
		case st.whole:
			return bodyHere
		case st.here:
			return bodyStreams
		case st.closed:
			return bodyAbandoned
		case woke && (!chunked || st.queued == queued):
			// Readable below the mark, or woken with nothing new: the
			// receive window is full (or the host short of socket
			// memory). The rest streams.
			return bodyStreams
		}
		if chunked {
			queued = st.queued
			setMark(st.queued + 1)
		}
		if err := rc.Read(pollReadable); err != nil {
			return bodyLate // the deadline (or the bound's end of the wait: see awaitBody)
		}
		if q.head.Framing == http1.FramingChunked {
			time.Sleep(backoff)
			backoff = min(2*backoff, chunkCheckMax)
		}
	}
}

// pollReadable is a raw read's readiness check: the socket is readable as
// SO_RCVLOWAT says (or closed, or in error), without reading.
func pollReadable(fd uintptr) bool {
	p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN | unix.POLLRDHUP}}
	n, err := unix.Poll(p, 0)
	return err == nil && n > 0 && p[0].Revents != 0
}

// queueState is what a check of the socket found.
type queueState struct {
	queued int  // bytes queued (up to what was asked)
	here   bool // the body is in the queue (whole, or enough of it)
	whole  bool // all of it
	closed bool // the client sent its FIN or reset, and the body is not whole
}

// check looks at the socket's queue without reading it: for a
// Content-Length, how many bytes it holds (up to target); for a chunked
// body, whether the bytes queued hold its end.
func (q *queuedBody) check(fd, target int) queueState {
	var st queueState
	if q.head.Framing == http1.FramingLength {
		st.queued = peekCount(fd, target)
		st.here = st.queued >= target
		st.whole = st.here && int64(target-q.prefix) == q.head.ContentLength-int64(len(q.pending))
	} else {
		// Only what is queued is copied: a trickle costs a few bytes.
		limit := target
		buf := make([]byte, peekCount(fd, limit))
		n, _, err := unix.Recvfrom(fd, buf, unix.MSG_PEEK|unix.MSG_DONTWAIT)
		if err != nil {
			n = 0
		}
		st.queued = n
		p := http1.ChunkedBody{}
		_, perr := p.Feed(q.pending)
		if perr == nil && !p.Done() && n > q.prefix {
			_, perr = p.Feed(buf[q.prefix:n])
		}
		st.whole = perr == nil && p.Done()
		st.here = perr != nil || p.Done() || n == limit
	}
	if !st.here {
		info, err := unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO)
		st.closed = err != nil || info.State != tcpEstablished
	}
	return st
}

// peekCount is how many bytes (at most max) the socket's receive queue
// holds, counted by the kernel without copying them (MSG_PEEK|MSG_TRUNC).
func peekCount(fd, max int) int {
	n, _, errno := unix.Syscall6(unix.SYS_RECVFROM, uintptr(fd), 0, uintptr(max),
		unix.MSG_PEEK|unix.MSG_TRUNC|unix.MSG_DONTWAIT, 0, 0)
	if errno != 0 {
		return 0
	}
	return int(n)
}

// bodyInHand makes sure the body of h, a request read from c at start, is
// in c's socket before the request is placed (whole: all of it; else the
// rest streams); when it cannot be, it answers c (408 late, 503 shed) or
// lets it go (the client left), and reports ok false: the connection then
// closes.
func (s *Shim) bodyInHand(c *datapath.Conn, h *http1.Head, start time.Time) (ok, whole bool) {
	end := s.awaitBody(c, h, start.Add(min(s.opts.BodyDeadline, s.opts.BodyTimeout)))
	switch end {
	case bodyLate:
		s.log.Info("request body not received in time", "method", h.Method, "client", c.RemoteAddr().String(), "waited", time.Since(start))
		s.rejectWhy(c, 408, h, fmt.Sprintf("the request body did not arrive within %v", min(s.opts.BodyDeadline, s.opts.BodyTimeout)))
		return false, false
	case bodyShed:
		s.log.Debug("request waiting for its body ended at the connection bound", "client", c.RemoteAddr().String())
		s.rejectWhy(c, 503, h, "too many connections (total bound); retry shortly")
		return false, false
	case bodyAbandoned:
		s.stats.countAbandoned(abandonedBody)
		s.log.Debug("client left before its request body arrived", "method", h.Method, "client", c.RemoteAddr().String())
		return false, false
	}
	return true, end == bodyHere
}
