package l7

import (
	"time"

	"github.com/lmwarden/lmwarden/l7/datapath"
)

// exchange is the shim's record of one request and its response: the
// Exchange it hands the datapath, and what only the shim keeps of it.
type exchange struct {
	datapath.Exchange
	// earlyAnswer: the replica answered before it took the whole request
	// body; the client connection closes after that answer.
	earlyAnswer bool
	// parked: how long admission kept the request waiting at the warden
	// (0: not at all); the client's response head says it (ParkedHeader).
	parked time.Duration
	// headAt: when the response head was read (time to first byte, when
	// no body byte is seen later).
	headAt time.Time
	// firstAt: the response's first byte as the time-to-first-byte
	// histogram counts it (the first body byte read after the head, else
	// the head); set when the exchange ends (observe).
	firstAt time.Time

	// sessionHash: the placement's session (0: none), whose weight in
	// the session table the response's end sets.
	sessionHash uint64

	// began: when the shim placed the request (the stall check's clock).
	began time.Time
	// responseBegan: the client has had the response head (the shim wrote
	// it, or the kernel carried it): an error from here on cuts a stream.
	responseBegan bool
	// headCarried: the kernel carried the response head to the client as
	// the replica wrote it (the shim added nothing to it).
	headCarried bool
	// carriedStatus: the status of a response head the kernel carried to
	// the client before the exchange failed (0: none), which the access
	// log writes: the shim never read that head.
	carriedStatus int
	// keepAliveSent: the head the shim wrote let the client keep its
	// connection (no Connection: close). A drain that begins while the
	// body is relayed does not take that back: the client may already be
	// sending its next request, which the drain answers.
	keepAliveSent bool
	aborter
}
