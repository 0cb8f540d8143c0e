package l7

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"syscall"
	"time"

	"github.com/lmwarden/lmwarden/agent/placement"
	"github.com/lmwarden/lmwarden/l7/datapath"
	"github.com/lmwarden/lmwarden/l7/http1"
)

// exchange serves one request whose head h was read from client: place it,
// connect, write the head, relay the body, the response head and the
// response body. It reports whether the client connection may carry
// another request.
func (s *Shim) exchange(client *datapath.Conn, h *http1.Head) (keepAlive bool) {
	s.stats.requests.Add(1)
	held := client.Pending
	if len(held) == 0 {
		held = client.Peeked
	}
	key := RoutingKeyOf(h, s.placer.KeySources(), held)
	client.Peeked = nil
	s.countKey(key)
	start := time.Now()
	acc := s.beginAccess(client, h, key, start)
	defer s.endAccess(client, acc)
	p, parked, ok := s.admit(client, h, key, start)
	if !ok {
		return false
	}
	if acc != nil {
		acc.p = &p // through the pointer: a retry that moves p is seen
	}
	// From here on the request is in flight: Done exactly once, whatever
	// path this function leaves by (p changes if Retry moves it; a failed
	// Retry has released it already).
	released := false
	defer func() {
		if !released {
			s.placer.Done(p, time.Now())
		}
	}()

	up, reused, err := s.connect(&p, &released)
	if err != nil {
		s.log.Warn("upstream connect failed", s.replicaAttrs(p.Replica, "err", err)...)
		s.rejectWhy(client, 502, h, fmt.Sprintf("could not connect to replica %d: %v", p.Replica, err))
		return false
	}
	client.Mark("conn")
	x := &exchange{
		Exchange: datapath.Exchange{Model: s.placer.Name(), Replica: p.Replica, Client: client, Upstream: up, Request: h, Idle: s.opts.BodyTimeout},
		parked:   parked, began: start, sessionHash: p.SessionHash,
	}
	x.setUpstream(up)
	if acc != nil {
		acc.x = x
	}
	s.trackExchange(x, true)
	status, err := s.relay(x, &p, reused)
	s.trackExchange(x, false)
	if err != nil {
		s.fail(x, p, status, start, err)
		return false
	}
	s.observe(x, start, time.Now())
	up = x.Upstream // relay may have replaced a dead pooled connection
	if x.Response.Reusable {
		s.pool.Put(p.Addr, up)
	} else {
		up.Close()
	}
	if s.log.Enabled(context.Background(), slog.LevelDebug) {
		s.log.Debug("request", s.logAttrs(x, p, x.Response.Status, start, nil)...)
	}
	if x.earlyAnswer {
		// The request ends here; the client's unread body is drained
		// for a moment so that the close does not reset the answer.
		s.placer.Done(p, time.Now())
		released = true
		lingerClose(client)
		return false
	}
	if x.headCarried {
		// The client has the replica's head as it was, without the
		// Connection: close a drain that began meanwhile would have
		// added: it may send its next request, which the drain answers.
		return h.KeepAlive && x.Response.Framing != http1.FramingClose
	}
	// What the head told the client, not the shim's state now: closing a
	// connection whose client was told it stays open races its next
	// request (a close before an answer).
	return x.keepAliveSent
}

// admit waits for the request's body where it may (bodywait.go) and
// places the request by key, parked first if admission says so. ok is
// false when the request ends here: the client left, or the shim answered
// it.
func (s *Shim) admit(client *datapath.Conn, h *http1.Head, key RoutingKey, start time.Time) (p placement.Placement, parked time.Duration, ok bool) {
	ok, whole := s.bodyInHand(client, h, start) // bodywait.go
	if !ok {
		return p, 0, false
	}
	// A body that is not whole in hand or in the socket does not steer
	// placement until it has arrived (placement.Request.BodyPending).
	bodyPending := !whole
	p, wait, err := s.placer.Admit(placement.Request{
		SessionID:        key.SessionID,
		AgentID:          key.AgentID,
		ParentAgentID:    key.ParentAgentID,
		ContextCompacted: key.ContextCompacted,
		BodyStart:        key.BodyStart,
		PinnedHeader:     key.PinnedHeader,
		PromptBytes:      key.PromptBytes,
		BodyPending:      bodyPending,
		NonInference:     !isInference(h),
		Source:           remoteAddr(client.TCPConn),
		Now:              start,
	})
	client.Mark("placed")
	if err == nil && wait != nil {
		if p, err = s.awaitAdmission(client, wait, h); errors.Is(err, errClientGone) {
			s.stats.countAbandoned(abandonedParked)
			return p, 0, false
		}
		parked = time.Since(start)
	}
	if err != nil {
		s.placementFailed(client, h, err)
		return p, parked, false
	}
	return p, parked, true
}

// placementFailed answers a request placement refused: 503 when no
// replica is healthy or admission's queue is full (with the Retry-After
// admission suggests), else 502.
func (s *Shim) placementFailed(client *datapath.Conn, h *http1.Head, err error) {
	var full *placement.AdmissionFullError
	switch {
	case errors.As(err, &full):
		s.rejectRetry(client, h, full.RetryAfter)
	case errors.Is(err, placement.ErrNoHealthyReplica) || errors.Is(err, placement.ErrAdmissionFull):
		s.reject(client, 503, h)
	default:
		s.log.Warn("placement failed", "err", err)
		s.reject(client, 502, h)
	}
}

// fail ends an exchange whose relay failed: what the client got of the
// response is recorded before the replica connection closes, and the
// shim answers status itself only if the kernel carried nothing of the
// replica's answer.
func (s *Shim) fail(x *exchange, p placement.Placement, status int, start time.Time, err error) {
	if !errors.Is(err, errClientGone) {
		s.recordCut(x) // before the replica connection closes
	}
	if status != 0 {
		// The shim answers the client itself: a kernel datapath must not
		// carry the replica's answer into it as well (unless it began).
		if x.cutRecorded() {
			if cs, known := x.recordedCut(); known && cs.Began {
				status, x.responseBegan = 0, true
			}
		} else if rc := s.caps.Carrier; rc != nil && rc.Disarm(&x.Exchange) {
			status, x.responseBegan = 0, true
		}
	}
	if x.Upstream != nil {
		x.Upstream.Close()
	}
	s.failed(x, p, status, start, err)
}

// failed ends an exchange that failed: the shim's own answer (status), or
// the API's error event on a stream that was cut on the replica's side,
// and a log line that says which side failed, naming the replica.
func (s *Shim) failed(x *exchange, p placement.Placement, status int, start time.Time, err error) {
	client, h := x.Client, x.Request
	gone := errors.Is(err, errClientGone)
	if gone {
		s.stats.countAbandoned(stageOf(err))
	}
	evented := false
	switch {
	case status != 0:
		s.rejectWhy(client, status, h, s.failureReason(x, status, err))
	case !gone && x.responseBegan:
		evented = s.endCutStream(x, err)
	}
	ctx := context.Background()
	switch {
	case gone || (status != 0 && status < 500 && x.aborted() == notAborted):
		// A client that left, or sent something wrong, is not the
		// replica's trouble.
		if s.log.Enabled(ctx, slog.LevelDebug) {
			s.log.Debug("exchange failed on the client's side", s.logAttrs(x, p, status, start, err)...)
		}
	case status == 408:
		s.log.Info("request body not received in time", s.logAttrs(x, p, status, start, err)...)
	case status != 0:
		s.log.Warn("exchange failed", s.logAttrs(x, p, status, start, err, "url", s.replicaURL(p.Replica), "cause", cutCause(x, err))...)
	default:
		s.log.Warn("response cut on the replica's side", s.logAttrs(x, p, status, start, err,
			"url", s.replicaURL(p.Replica), "cause", cutCause(x, err), "error_event_sent", evented)...)
	}
}

// failureReason says, for the client, why the shim answers status.
func (s *Shim) failureReason(x *exchange, status int, err error) string {
	switch {
	case x.aborted() == abortUnhealthy:
		return fmt.Sprintf("replica %d stopped answering (marked unhealthy)", x.Replica)
	case status == 408:
		return fmt.Sprintf("the request body did not arrive within %v", s.opts.BodyDeadline)
	case status == 504:
		return fmt.Sprintf("replica %d did not answer within %v", x.Replica, s.opts.ResponseTimeout)
	case status == 502:
		return fmt.Sprintf("replica %d failed before answering: %v", x.Replica, err)
	}
	return ""
}

// replicaURL is a replica's URL ("" when the placer does not say).
func (s *Shim) replicaURL(replica int) string {
	if replica >= 0 {
		return s.placer.ReplicaURL(replica)
	}
	return ""
}

// parkedPoll is how often a parked request checks that its client is
// still there.
const parkedPoll = 50 * time.Millisecond

// awaitAdmission waits while admission parks the request: until a replica
// has room, the wait's deadline (the admission timeout) passes, or the
// client leaves
// (errClientGone: the request is cancelled, nothing is answered). Nothing
// is read from the client meanwhile (its body stays in the socket, and
// with a peeked head so does the head); its leaving shows in the socket's
// TCP state. As with a pending response (see clientWatch), a FIN is not
// leaving by itself: the client may only have half-closed. An HTTP/1.1
// client is sent "100 Continue" then, which a closed socket answers with
// a reset; an HTTP/1.0 one is found out when its answer is written.
func (s *Shim) awaitAdmission(client *datapath.Conn, w *placement.Wait, h *http1.Head) (placement.Placement, error) {
	s.stats.parked.Add(1)
	timer := time.NewTimer(time.Until(w.Deadline))
	defer timer.Stop()
	tick := time.NewTicker(parkedPoll)
	defer tick.Stop()
	probed := false
	for {
		select {
		case <-w.Ready:
		case <-timer.C:
		case <-tick.C:
			if !probed && h.Version == "HTTP/1.1" && peerGone(client, false) {
				probed = true
				_, _ = client.WriteAll(time.Second, []byte("HTTP/1.1 100 Continue\r\n\r\n"))
			}
			if !peerGone(client, true) {
				continue
			}
			s.placer.Abandon(w, time.Now()) // its place goes to the next waiter at once
			return placement.Placement{}, errClientGone
		}
		return s.placer.Claim(w, time.Now())
	}
}

// connect returns a connection to p's replica. A connect failure (no byte
// sent yet) moves the request to the next-best replica once, through
// Model.Retry, which updates *p; a failed Retry releases the request itself
// (*released = true: no Done).
func (s *Shim) connect(p *placement.Placement, released *bool) (*datapath.Conn, bool, error) {
	ctx := context.Background()
	up, reused, err := s.pool.Get(ctx, p.Addr)
	if err == nil {
		return up, reused, nil
	}
	next, rerr := s.placer.Retry(*p, time.Now())
	if rerr != nil {
		*released = true
		return nil, false, err
	}
	s.stats.retries.Add(1)
	s.log.Info("retrying on another replica", "from", p.Replica, "to", next.Replica, "err", err)
	*p = next
	return s.pool.Get(ctx, p.Addr)
}

// relayDechunked relays a chunked response body as plain data, for an
// HTTP/1.0 client that cannot parse chunks; the shim does this itself,
// whatever the datapath, and closes the client connection after it.
func relayDechunked(x *datapath.Exchange) error {
	n, err := datapath.RelayChunked(x.Client, x.Upstream, x.Idle, true, true)
	x.BodyBytesDown += n
	return err
}

// relayRequestBody hands the body to the datapath within the body
// deadline: the userspace copy bounds its reads of the client with it,
// and whatever the datapath, an exchange still waiting for its body a
// moment after the deadline is ended (its replica connection closed,
// which aborts the replica's request). A body that arrives lets the
// request steer placement from then on.
func (s *Shim) relayRequestBody(x *exchange, p *placement.Placement) error {
	x.BodyDeadline = time.Now().Add(s.opts.BodyDeadline)
	if x.Request.Framing == http1.FramingNone || (x.Request.Framing == http1.FramingLength && x.Request.ContentLength == 0) {
		s.bodyArrived(p)
		return s.dp.RelayRequestBody(&x.Exchange)
	}
	x.Client.SetReadLimit(x.BodyDeadline)
	t := time.AfterFunc(s.opts.BodyDeadline+bodyDeadlineSlack, func() { x.abort(abortBody) })
	err := s.dp.RelayRequestBody(&x.Exchange)
	t.Stop()
	x.Client.SetReadLimit(time.Time{})
	if err == nil {
		s.bodyArrived(p)
	}
	return err
}

// bodyDeadlineSlack: past the body deadline, how long a datapath that
// does not read the client itself (the kernel carries the body) has
// before the shim ends the exchange.
const bodyDeadlineSlack = 250 * time.Millisecond

func (s *Shim) bodyArrived(p *placement.Placement) {
	s.placer.BodyArrived(p)
}

// trackArmed records that x may be carried by the datapath (or no longer),
// so that Close can disarm it; one armed while Close ran is disarmed here.
func (s *Shim) trackArmed(x *exchange, on bool) {
	s.mu.Lock()
	if !on {
		delete(s.armed, x)
		s.mu.Unlock()
		return
	}
	s.armed[x] = struct{}{}
	closing := s.closing.Load()
	s.mu.Unlock()
	if closing {
		s.caps.Carrier.Disarm(&x.Exchange)
	}
}

// probeGuard is what a client watch runs before its 100 Continue probe
// while the kernel may carry the response: disarm it, and probe only if
// it carried nothing yet.
func (s *Shim) probeGuard(x *exchange, armed bool) func() bool {
	if !armed {
		return nil
	}
	return func() bool { return !s.caps.Carrier.Disarm(&x.Exchange) }
}

// headAsIs reports whether the client may get the replica's response head
// as it is, so that a kernel datapath may carry it: an HTTP/1.1 client
// keeping its connection (no Connection header to add), not parked
// (no X-Warden-Parked-Seconds to add), with the shim not shutting down.
// The kernel itself leaves heads with hop-by-hop fields to the shim.
func (s *Shim) headAsIs(x *exchange) bool {
	h := x.Request
	return h.Version == "HTTP/1.1" && h.KeepAlive && x.parked == 0 && !s.closing.Load()
}

// awaitResponse waits for the response: carried whole by an armed
// datapath, or its head read here (a datapath that hands the response to
// the shim leaves what it read of it in x.Upstream.Pending).
func (s *Shim) awaitResponse(x *exchange, watch *clientWatch, armed bool) (*http1.ResponseHead, bool, error) {
	if armed {
		x.Idle = s.opts.ResponseTimeout
		resp, carried, err := s.caps.Carrier.AwaitResponse(&x.Exchange)
		if err != nil || carried {
			return resp, carried, err
		}
		x.Idle = s.opts.BodyTimeout
	}
	resp, err := s.readResponseHead(x, watch)
	return resp, false, err
}

// observe hands the timings of an exchange relayed to its end to the
// placer, when it keeps them.
func (s *Shim) observe(x *exchange, start, end time.Time) {
	if x.Response == nil {
		return
	}
	first := x.headAt
	if at, waiting := x.Upstream.ReadStamp(); waiting {
		x.Upstream.StampNextRead(false) // nothing was read: the head's time stands
	} else if !at.IsZero() {
		first = at
	}
	x.firstAt = first
	s.placer.ObserveResponse(placement.ResponseTiming{
		Replica: x.Replica, FirstByte: first.Sub(start), Duration: end.Sub(start), Parked: x.parked, Status: x.Response.Status,
		SessionHash: x.sessionHash, BodyBytes: x.BodyBytesUp,
	}, end)
}

// withLength is h with the Content-Length the datapath still has to move
// (the bytes that went out with the head are already sent).
func withLength(h *http1.Head, remaining int64) *http1.Head {
	c := *h
	c.ContentLength = remaining
	return &c
}

var errClientGone = errors.New("l7: client went away")

// readResponseHead reads the response head, relaying interim 1xx responses
// to the client, within ResponseTimeout (prefill of a long prompt on a
// loaded replica can take a while, so it is generous, but a dead replica
// must not hold a client forever).
func (s *Shim) readResponseHead(x *exchange, watch *clientWatch) (*http1.ResponseHead, error) {
	up := x.Upstream
	deadline := time.Now().Add(s.opts.ResponseTimeout)
	for {
		_ = up.SetReadDeadline(deadline)
		fresh := len(up.Pending) == 0
		raw, rest, err := http1.ReadRawHead(up.TCPConn, up.Pending, false)
		if err != nil {
			if fresh && (err == io.EOF || errors.Is(err, syscall.ECONNRESET)) {
				err = datapath.ErrNoResponse
			}
			return nil, err
		}
		r, err := http1.ParseResponseHead(raw, x.Request.Method)
		if err != nil {
			return nil, err
		}
		up.Pending = rest
		if r.Status >= 200 {
			return r, nil
		}
		if r.Status == 101 {
			return nil, http1.ErrBadResponse // no upgrades: Upgrade is never forwarded
		}
		// 100 answers an Expect the shim did not forward; an HTTP/1.0
		// client may not be sent any 1xx (RFC 9110 section 15.2).
		if r.Status != 100 && x.Request.Version != "HTTP/1.0" {
			if err := watch.writeHead(s.opts.BodyTimeout, http1.InterimHead(r), false); err != nil {
				return nil, err
			}
		}
	}
}

// clientKeepAlive decides whether the client connection carries another
// request after this response: not when the body ends with the close
// (close-delimited, or de-chunked for an HTTP/1.0 client).
func (s *Shim) clientKeepAlive(h *http1.Head, r *http1.ResponseHead) bool {
	return h.KeepAlive && r.Framing != http1.FramingClose && !dechunked(h, r) && !s.closing.Load()
}

// dechunked reports whether the response body goes to the client as plain
// data ended by the close: an HTTP/1.0 client cannot read chunks.
func dechunked(h *http1.Head, r *http1.ResponseHead) bool {
	return h.Version == "HTTP/1.0" && r.Framing == http1.FramingChunked
}

// answeredEarly reports whether the replica has sent something (its
// response, as the relay of the request body failed) that the shim can
// still read, or that an armed datapath carries. Of the others only the
// userspace datapath leaves the replica socket plain to read after a
// failed request body.
func (s *Shim) answeredEarly(x *exchange, armed bool) bool {
	if armed {
		return s.caps.Carrier.AnsweredEarly(&x.Exchange) || len(x.Upstream.Pending) > 0 || readable(x.Upstream)
	}
	if s.caps.Userspace == nil && (s.caps.EarlyReader == nil || !s.caps.EarlyReader.PlainUpstream(&x.Exchange)) {
		return false
	}
	return len(x.Upstream.Pending) > 0 || readable(x.Upstream)
}

// readable reports, without waiting or consuming anything, whether c has
// bytes to read.
func readable(c *datapath.Conn) bool {
	rc, err := c.SyscallConn()
	if err != nil {
		return false
	}
	n := 0
	var b [1]byte
	_ = rc.Read(func(fd uintptr) bool {
		n, _, _ = syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return true // never wait for readiness
	})
	return n > 0
}

// reject answers status on a connection the shim is about to close, then
// drains what the client still sends for a moment, so that closing with
// unread data does not reset the connection before the answer is read.
// h is the request answered, nil when its head could not be read; the
// answer to a HEAD request has no body.
func (s *Shim) reject(c *datapath.Conn, status int, h *http1.Head) {
	s.rejectAnswer(c, status, h, "", s.opts.RetryAfter)
}

// rejectWhy is reject with a reason for the client: the body is the API's
// error JSON on an API path (apierror.go), else plain text.
func (s *Shim) rejectWhy(c *datapath.Conn, status int, h *http1.Head, why string) {
	s.rejectAnswer(c, status, h, why, s.opts.RetryAfter)
}

// rejectRetry answers 503 with the Retry-After admission suggests.
func (s *Shim) rejectRetry(c *datapath.Conn, h *http1.Head, after time.Duration) {
	s.rejectAnswer(c, 503, h, "", after)
}

// rejectAnswer is reject with a reason and the Retry-After of a 503.
func (s *Shim) rejectAnswer(c *datapath.Conn, status int, h *http1.Head, why string, after time.Duration) {
	s.stats.countStatus(status)
	c.Answered, c.AnsweredAt = status, time.Now()
	s.placer.ObserveAnswered(status, time.Now())
	text := statusText(status)
	msg := "lmwarden: " + text
	if why != "" {
		msg += ": " + why
	}
	ctype, body := "text/plain; charset=utf-8", []byte(msg+"\n")
	if a := shapeOf(h); a != apiNone {
		ctype, body = "application/json", errorJSON(a, status, msg)
	}
	b := make([]byte, 0, 256+len(body))
	b = append(b, "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(status), 10)
	b = append(b, ' ')
	b = append(b, text...)
	b = append(b, "\r\n"...)
	b = http1.AppendHeader(b, "Content-Type", ctype)
	b = append(b, "Connection: close\r\n"...)
	if status == 503 {
		b = http1.AppendHeader(b, "Retry-After", strconv.Itoa(int(max(1, after/time.Second))))
	}
	b = http1.AppendHeader(b, "Content-Length", strconv.Itoa(len(body)))
	b = append(b, "\r\n"...)
	if h == nil || h.Method != "HEAD" {
		b = append(b, body...)
	}
	if _, err := c.WriteAll(time.Second, b); err != nil {
		return
	}
	lingerClose(c)
}

// lingerClose ends the shim's side of c and drains what the client still
// sends for a moment: closing with unread data would reset the connection,
// and a reset can destroy the answer before the client has read it.
func lingerClose(c *datapath.Conn) {
	_ = c.CloseWrite()
	_ = c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	_, _ = io.CopyN(io.Discard, c.TCPConn, 256<<10)
}

func statusText(code int) string {
	switch code {
	case 400:
		return "Bad Request"
	case 408:
		return "Request Timeout"
	case 431:
		return "Request Header Fields Too Large"
	case 502:
		return "Bad Gateway"
	case 503:
		return "Service Unavailable"
	case 504:
		return "Gateway Timeout"
	case 505:
		return "HTTP Version Not Supported"
	}
	return "Error"
}

// logAttrs describes an exchange for the log: never the prompt, never the
// raw session id (only the model's keyed hash of it).
func (s *Shim) logAttrs(x *exchange, p placement.Placement, status int, start time.Time, err error, more ...any) []any {
	a := []any{
		"replica", p.Replica, "kind", p.Kind.String(),
		"session", strconv.FormatUint(p.SessionHash, 16), "method", x.Request.Method,
		"status", status, "up_bytes", x.BodyBytesUp, "down_bytes", x.BodyBytesDown,
		"duration", time.Since(start),
	}
	if err != nil {
		a = append(a, slog.String("err", err.Error()))
	}
	return append(a, more...)
}
