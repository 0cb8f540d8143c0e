package l7

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/lmwarden/lmwarden/agent/placement"
	"github.com/lmwarden/lmwarden/l7/datapath"
	"github.com/lmwarden/lmwarden/l7/http1"
)

// relay moves one exchange once the upstream connection is up, in two
// legs as a reverse proxy does: the request (its head, then its body
// through the datapath) to the replica, then the response (its head,
// then its body) to the client. A datapath that carries whole responses
// is armed before the request head goes out. On error relay returns the
// status the shim should still answer with (0: none, the client is gone
// or has already seen part of the response).
func (s *Shim) relay(x *exchange, p *placement.Placement, reused bool) (int, error) {
	if x.Request.ExpectContinue {
		// The shim stripped Expect and is ready for the body now.
		if _, err := x.Client.WriteAll(s.opts.BodyTimeout, []byte("HTTP/1.1 100 Continue\r\n\r\n")); err != nil {
			return 0, err
		}
	}
	r := &relayRun{s: s, x: x, p: p, reused: reused, carrier: s.caps.Carrier}
	defer func() {
		if r.armed {
			s.trackArmed(x, false)
		}
	}()
	if status, err := r.sendRequest(); err != nil {
		return status, err
	}
	return r.relayResponse()
}

// relayRun is what the two legs of one relay share.
type relayRun struct {
	s      *Shim
	x      *exchange
	p      *placement.Placement
	reused bool   // x.Upstream came from the pool
	head   []byte // the request head as the replica gets it
	// sent is the body bytes that went out with the head; it stays valid
	// until the next read into the client buffer, which only happens
	// after this exchange (the watch reads into its own).
	sent []byte
	// replayable: the whole request is in head and sent, so it can go
	// again on a new connection.
	replayable bool
	carrier    datapath.ResponseCarrier // nil: the datapath carries no whole responses
	armed      bool                     // the carrier may carry this response
}

// sendRequest is the request leg: the head, with the body bytes that came
// with it, then the rest of the body through the datapath.
func (r *relayRun) sendRequest() (int, error) {
	s, x := r.s, r.x
	client, h := x.Client, x.Request
	r.head = http1.UpstreamHead(h, r.p.RankHeader, r.p.Addr)
	// Body bytes that came with the head go out in the same writev.
	var early int
	if h.Framing == http1.FramingLength {
		early = int(min(int64(len(client.Pending)), h.ContentLength))
	}
	if err := r.writeHead(client.Pending[:early]); err != nil {
		return 502, err
	}
	r.sent = client.Pending[:early]
	r.replayable = h.Framing == http1.FramingNone || (h.Framing == http1.FramingLength && int64(early) == h.ContentLength)
	client.Pending = client.Pending[early:]
	x.BodyBytesUp = int64(early)
	if h.Framing == http1.FramingLength {
		x.Request = withLength(h, h.ContentLength-int64(early))
	}
	client.Mark("written")
	err := s.relayRequestBody(x, r.p)
	x.Request = h
	if err == nil {
		return 0, nil
	}
	if errors.Is(err, http1.ErrBadChunk) || errors.Is(err, datapath.ErrLineTooLong) {
		return 400, err // the client's framing is broken
	}
	if x.aborted() == abortBody || !time.Now().Before(x.BodyDeadline) {
		return 408, err // the client's body did not come in time
	}
	if peerGone(client, true) || (errors.Is(err, io.ErrUnexpectedEOF) && peerGone(client, false)) {
		// The client closed (or reset) before its whole body came:
		// its leaving, not the replica's failure.
		return 0, fmt.Errorf("%w: %w: %w", errClientGone, errBodyAbandoned, err)
	}
	if !s.answeredEarly(x, r.armed) {
		return 502, err
	}
	// The replica answered before it took the whole body (a body too
	// large, say) and closed: relay its answer, not a 502.
	x.earlyAnswer = true
	return 0, nil
}

// writeHead arms the datapath and writes the request head with early, the
// body bytes that came with it.
func (r *relayRun) writeHead(early []byte) error {
	x := r.x
	err := r.arm()
	x.Client.Mark("armed")
	if err == nil {
		_, err = x.Upstream.WriteAll(r.s.opts.BodyTimeout, r.head, early)
	}
	if err != nil && r.reused {
		// The pooled connection died between the liveness check and this
		// write: the replica saw nothing usable, so a fresh one is safe.
		if err = r.redial(); err == nil {
			_, err = x.Upstream.WriteAll(r.s.opts.BodyTimeout, r.head, early)
		}
	}
	return err
}

// arm arms the datapath to carry the whole response, when it can and the
// client may get the replica's head as it is.
func (r *relayRun) arm() error {
	r.armed = false
	if r.carrier == nil || !r.s.headAsIs(r.x) {
		return nil
	}
	var err error
	if r.armed, err = r.carrier.ArmResponse(&r.x.Exchange); r.armed {
		r.s.trackArmed(r.x, true)
	}
	return err
}

// redial replaces x's upstream connection by a new one to the same
// replica, armed again.
func (r *relayRun) redial() error {
	x := r.x
	x.Upstream.Close()
	var err error
	if x.Upstream, err = r.s.pool.Dial(context.Background(), r.p.Addr); err != nil {
		return err
	}
	x.setUpstream(x.Upstream)
	return r.arm()
}

// relayResponse is the response leg: wait for the response head (carried
// whole by an armed datapath, or read here), then tell the client and
// relay the body.
func (r *relayRun) relayResponse() (int, error) {
	s, x := r.s, r.x
	client, h := x.Client, x.Request
	// A kernel-carried response reaches the client without the shim: the
	// watch disarms it before it writes a 100 Continue probe.
	client.Mark("body")
	watch := watchResponse(client, x.Upstream, h, s.probeGuard(x, r.armed))
	resp, carried, err := s.awaitResponse(x, watch, r.armed)
	if err != nil && r.reused && r.replayable && errors.Is(err, datapath.ErrNoResponse) {
		// The replica closed a pooled connection instead of answering:
		// it was closing it as idle when the request arrived and never
		// processed it (Go's http.Transport retries this case too). The
		// whole request is still here, so send it once on a new one.
		if watch.stop() {
			return 0, errClientGone
		}
		if err := r.replay(); err != nil {
			return 502, err
		}
		watch = watchResponse(client, x.Upstream, h, s.probeGuard(x, r.armed))
		resp, carried, err = s.awaitResponse(x, watch, r.armed)
	}
	if err != nil {
		// A kernel datapath's redirect into a client that reset fails
		// the replica's send, and the replica may close before the watch
		// has read that reset: the client left, the replica did nothing
		// wrong.
		if watch.stop() || peerGone(client, true) {
			return 0, errClientGone
		}
		if carried {
			x.responseBegan = true
			if resp != nil {
				x.carriedStatus = resp.Status
			}
			return 0, err // the client has part of the response
		}
		if errors.Is(err, http1.ErrHeadTimeout) {
			return 504, err
		}
		return 502, err
	}
	client.Mark("response")
	x.Response = resp
	if x.earlyAnswer {
		resp.Reusable = false // the rest of the request never went there
	}
	if carried {
		return r.carried(watch)
	}
	return r.relayBody(watch, resp)
}

// replay sends the whole request again on a new connection.
func (r *relayRun) replay() error {
	if err := r.redial(); err != nil {
		return err
	}
	// Counted before the write: a kernel datapath can carry the answer
	// to the client before this goroutine runs again.
	r.s.stats.replays.Add(1)
	_, err := r.x.Upstream.WriteAll(r.s.opts.BodyTimeout, r.head, r.sent)
	return err
}

// carried ends an exchange whose response the kernel carried whole.
func (r *relayRun) carried(watch *clientWatch) (int, error) {
	x := r.x
	x.responseBegan, x.headCarried = true, true
	// The kernel sent the first byte; the datapath says when. (A read
	// time left on a pooled connection by an earlier exchange the shim
	// relayed is not this one's.)
	x.headAt = x.FirstByteAt
	if x.headAt.IsZero() {
		x.headAt = time.Now()
	}
	x.Upstream.StampNextRead(false)
	if watch.stop() {
		return 0, errClientGone
	}
	return 0, nil
}

// relayBody writes the client its response head and relays the body,
// through the datapath or de-chunked here.
func (r *relayRun) relayBody(watch *clientWatch, resp *http1.ResponseHead) (int, error) {
	s, x := r.s, r.x
	client, h := x.Client, x.Request
	dechunk := dechunked(h, resp)
	// The first body byte: with the head, or the next read that brings
	// one (a streamed response's first event) when the shim relays the
	// body itself. A kernel datapath reads only what its verdict passes
	// (a response's tail, say), so its reads say nothing of the first
	// byte: the head's time stands there.
	x.headAt = time.Now()
	x.Upstream.StampNextRead(len(x.Upstream.Pending) == 0 && (s.caps.Userspace != nil || dechunk))
	keep := s.clientKeepAlive(h, resp) && !x.earlyAnswer
	if err := watch.writeHead(s.opts.BodyTimeout, http1.WithParked(http1.ClientResponseHead(resp, h.Version, keep, dechunk), x.parked), true); err != nil {
		watch.stop()
		return 0, errClientGone
	}
	x.responseBegan, x.keepAliveSent = true, keep
	x.Idle = s.opts.ResponseTimeout
	var err error
	if dechunk {
		err = relayDechunked(&x.Exchange)
	} else {
		err = s.dp.RelayResponseBody(&x.Exchange)
	}
	// A relay that failed on a client socket the client reset may return
	// before the watch has read that reset: the client left, the replica
	// did nothing wrong.
	if watch.stop() || (err != nil && peerGone(client, true)) {
		return 0, errClientGone
	}
	return 0, err
}
