package l7

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lmwarden/lmwarden/l7/datapath"
)

// An exchange can be ended from outside its goroutine: its request body
// missed the body deadline, or its replica was marked unhealthy while the
// exchange made no progress (a replica stopped with SIGSTOP, or hung: its
// sockets stay open and silent, and without this the client would wait
// for the whole response timeout). Ending it closes the replica
// connection, which wakes whatever the exchange's goroutine is blocked in,
// whatever the datapath; that goroutine then answers the client (408,
// 502) or ends its stream with the API's error event (cut.go).

// abortReason says why an exchange was ended from outside.
type abortReason int32

const (
	notAborted     abortReason = iota
	abortBody                  // the request body missed its deadline
	abortUnhealthy             // the replica is unhealthy and the exchange stalled
)

func (r abortReason) String() string {
	switch r {
	case abortBody:
		return "the request body did not arrive in time"
	case abortUnhealthy:
		return "the replica stopped answering (marked unhealthy, nothing sent for a while)"
	}
	return ""
}

// aborter is the part of an Exchange that outside goroutines touch.
type aborter struct {
	mu     sync.Mutex
	reason atomic.Int32
	up     *datapath.Conn // the replica connection to close
	// What a kernel datapath said of the response when it was stopped
	// (cut.go), asked once, before the replica connection closed.
	cut                         datapath.CutState
	cutAsked, cutDone, cutKnown bool
}

// setUpstream records the exchange's current replica connection (it
// changes when a dead pooled one is replaced); one set after an abort is
// closed at once.
func (a *aborter) setUpstream(c *datapath.Conn) {
	a.mu.Lock()
	a.up = c
	aborted := a.reason.Load() != 0
	a.mu.Unlock()
	if aborted && c != nil {
		c.Close()
	}
}

// abort ends the exchange for reason (the first reason wins).
func (a *aborter) abort(reason abortReason) {
	if !a.reason.CompareAndSwap(0, int32(reason)) {
		return
	}
	a.mu.Lock()
	up := a.up
	a.mu.Unlock()
	if up != nil {
		up.Close()
	}
}

// aborted is why the exchange was ended from outside (notAborted: it was not).
func (a *aborter) aborted() abortReason { return abortReason(a.reason.Load()) }

// isTimeout reports a deadline's error.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// replicaAttrs name a replica in a log line: its index and URL.
func (s *Shim) replicaAttrs(replica int, more ...any) []any {
	a := []any{"replica", replica}
	if replica >= 0 {
		a = append(a, "url", s.placer.ReplicaURL(replica))
	}
	return append(a, more...)
}

// stallCheck is how often the shim looks for exchanges stalled on an
// unhealthy replica; StallGrace how long one must have sent nothing to
// its client before it is ended.
const stallCheck = 500 * time.Millisecond

// trackExchange records x as in flight (or no longer), for the stall
// check.
func (s *Shim) trackExchange(x *exchange, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if on {
		s.inflight[x] = struct{}{}
	} else {
		delete(s.inflight, x)
	}
}

// watchStalls ends the exchanges whose replica the placer has marked
// unhealthy and that have sent their client nothing for StallGrace, until
// done is closed.
func (s *Shim) watchStalls(done <-chan struct{}) {
	t := time.NewTicker(stallCheck)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		s.mu.Lock()
		var check []*exchange
		for x := range s.inflight {
			check = append(check, x)
		}
		s.mu.Unlock()
		down := map[int]bool{}
		for _, x := range check {
			unhealthy, seen := down[x.Replica]
			if !seen {
				unhealthy = x.Replica >= 0 && !s.placer.Healthy(x.Replica)
				down[x.Replica] = unhealthy
			}
			if !unhealthy || x.aborted() != notAborted {
				continue
			}
			if quiet := quietFor(x); quiet >= s.opts.StallGrace {
				s.log.Warn("ending a request stalled on an unhealthy replica", s.replicaAttrs(x.Replica, "quiet", quiet.Round(time.Millisecond))...)
				s.recordCut(x)
				x.abort(abortUnhealthy)
			}
		}
	}
}

// quietFor is how long the exchange has sent its client nothing: since it
// began, or since the last data the client socket sent (the kernel's
// count, so a response the kernel carries counts too).
func quietFor(x *exchange) time.Duration {
	age := time.Since(x.began)
	rc, err := x.Client.SyscallConn()
	if err != nil {
		return age
	}
	quiet := age
	_ = rc.Control(func(fd uintptr) {
		if info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
			quiet = min(age, time.Duration(info.Last_data_sent)*time.Millisecond)
		}
	})
	return quiet
}
