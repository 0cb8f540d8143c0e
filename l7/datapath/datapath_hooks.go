package datapath

import (
	"errors"

	"github.com/lmwarden/lmwarden/l7/http1"
)

// Optional interfaces a kernel Datapath implements besides Datapath, for
// the steps of an exchange it must take part in. It names those it
// implements in its Capabilities.

// HeadReader is implemented by a Datapath that reads a connection's first
// request head itself. The sk_skb datapath peeks it (MSG_PEEK) instead of
// reading it: a socket that joins a sockmap with a segment half read has
// that whole segment verdicted again, so the head and the body bytes that
// came with it would be sent twice; peeked, every byte of the stream meets
// the verdict exactly once, and the kernel drops the head (which the shim
// forwards, rewritten) and carries the body that follows it.
type HeadReader interface {
	// ReadFirstHead reads the first head of c; rest is what c.Pending
	// must become (the sk_skb datapath consumes nothing: nil).
	ReadFirstHead(c *Conn) (h *http1.Head, rest []byte, err error)
}

// ConnPreparer is implemented by a Datapath that sets a client connection
// up before its first request head is read (the sk_msg datapath reads
// the socket's cookie, sizes its send buffer and makes sure it joined
// lmw_client_socks): done while the request is still on its way, not
// between its head and the replica.
type ConnPreparer interface {
	// PrepareConn sets c up; what fails here is tried again, or
	// reported, where the datapath needs it.
	PrepareConn(c *Conn)
}

// HeadWaiter is implemented by a Datapath that waits for a keep-alive
// connection's next head without reading it.
type HeadWaiter interface {
	// WaitHead waits until c has a byte to read; handled is false when
	// the datapath leaves that to the shim (c.Fill).
	WaitHead(c *Conn) (handled bool, err error)
}

// ResponseCarrier is implemented by a Datapath that can carry a whole
// response, its head included, from the replica to the client without
// the shim reading it (the sk_msg datapath). The shim arms it only when
// the client may get the replica's head as it is: an HTTP/1.1 client
// that keeps its connection, with the shim not shutting down (any other
// client needs a rewritten head).
type ResponseCarrier interface {
	// ArmResponse prepares x.Upstream, before the request head is written
	// to it, so that every byte of the response meets the kernel's
	// decision. armed is false when this exchange cannot be carried (its
	// upstream socket is not paired with the replica's, say); the shim
	// then reads the response itself, as in user mode.
	ArmResponse(x *Exchange) (armed bool, err error)
	// AwaitResponse waits, after the request has been sent, until the
	// response ended in the kernel (carried: x.Response must then be
	// resp, and x.BodyBytesDown is filled), or the kernel handed it from
	// its first byte to the shim (carried false: the shim reads the head
	// from x.Upstream, Pending first, and calls RelayResponseBody), or an
	// error. A response the kernel stopped carrying in its body is
	// finished here in userspace, and counts as carried. idle bounds the
	// wait for the head; x.Idle the pauses of the body. It must return
	// ErrNoResponse when the replica closed before the first byte of a
	// response.
	AwaitResponse(x *Exchange) (resp *http1.ResponseHead, carried bool, err error)
	// AnsweredEarly reports whether the replica has begun its response
	// (a relay of the request body failed: the shim must not answer 502
	// then, the client has the replica's answer).
	AnsweredEarly(x *Exchange) bool
	// Disarm stops the kernel from carrying x's response, before the
	// shim writes to the client itself (an error answer, a 100 Continue
	// probe): what the replica sends from then on reaches the shim.
	// carried reports that the kernel had already begun carrying the
	// response to the client (then the shim must not write to it).
	Disarm(x *Exchange) (carried bool)
}

// ErrNoResponse: the upstream closed or reset the connection before
// sending a single byte of the response (a pooled connection the replica
// was closing as idle: the request may be sent again on a new one).
var ErrNoResponse = errors.New("l7: upstream closed without a response")

// EarlyAnswerReader is implemented by a kernel Datapath that leaves some
// replica sockets plain while the request body goes up (the sk_skb
// datapath: one it has not put into its SOCKHASH yet). After a failed
// request body the shim reads a replica's early answer (a 413 to a body
// it will not take, then its close) from such a socket as the userspace
// datapath does.
type EarlyAnswerReader interface {
	// PlainUpstream reports whether x's replica socket is one the shim
	// reads as it is: nothing the datapath took over, so an answer queued
	// there survives the replica's reset.
	PlainUpstream(x *Exchange) bool
}

// QueuedRequest is implemented by a Datapath that may leave the current
// request's head in the client's socket (the sk_skb datapath peeks a
// connection's first head), or take the socket's receive queue over (a
// socket in its SOCKHASH: what arrives meets the verdict, not the queue).
// The shim waits for a request's body in the socket's queue before it
// places the request (l7/bodywait.go), and must know where the body
// starts there, or that it cannot wait there.
type QueuedRequest interface {
	// QueuedHead is how many bytes of the current request's head are
	// still in c's socket, ahead of its body; taken reports a queue the
	// datapath has taken over (the shim does not wait on it).
	QueuedHead(c *Conn) (n int, taken bool)
}
