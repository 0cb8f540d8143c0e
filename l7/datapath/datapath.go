package datapath

import (
	"time"

	"github.com/lmwarden/lmwarden/l7/http1"
)

// Exchange is one request and its response as the datapath sees them. The
// shim fills it: it has read the request head from Client, chosen the
// replica, connected Upstream and written the (rewritten) request head
// there. Bodies are the datapath's job.
type Exchange struct {
	Model   string // model name, for counters
	Replica int    // replica index of the placement, for counters
	Client  *Conn  // Client.Pending: body bytes read with the head, then maybe the next pipelined request
	// Upstream.Pending: response bytes read with the response head.
	Upstream *Conn
	Request  *http1.Head
	Response *http1.ResponseHead // set by the shim before RelayResponseBody
	// Idle bounds how long the datapath may wait for progress (a read or a
	// write) before giving up with a timeout error; it renews on progress.
	Idle time.Duration

	// FirstByteAt: when the first response byte went to the client, set
	// by a datapath that carried the response itself (ResponseCarrier).
	FirstByteAt time.Time

	// Filled in by the datapath: body bytes it moved each way.
	BodyBytesUp, BodyBytesDown int64

	// BodyDeadline: the request body must have arrived by then (the
	// model's body_timeout after the shim began to forward it). The
	// userspace copy bounds its reads of the client with it; whatever the
	// datapath, the shim ends an exchange still waiting for its body a
	// moment later (abort.go).
	BodyDeadline time.Time

	// respFrame is where the chunked parser of whoever relayed the
	// response body's last bytes stands: UserPath's, or a kernel
	// datapath's (NoteResponseFrame); respFrameValid: one did.
	respFrame      http1.ChunkedBody
	respFrameValid bool
}

// NoteResponseFrame is for a kernel datapath that relayed the last bytes
// of a chunked response body itself: p is where its parser stands, which
// tells a cut that follows whether the client's bytes end between two
// chunks (cut.go).
func (x *Exchange) NoteResponseFrame(p http1.ChunkedBody) {
	x.respFrame, x.respFrameValid = p, true
}

// ResponseFrame is where the chunked parser of whoever relayed the
// response body's last bytes stands (ok false: nobody parsed it).
func (x *Exchange) ResponseFrame() (p http1.ChunkedBody, ok bool) {
	return x.respFrame, x.respFrameValid
}

// Datapath moves the bodies of an exchange between the two sockets. The
// shim keeps everything that needs a decision in userspace (request head,
// placement, rewritten head, response head) and hands the bulk to a
// Datapath. The userspace one (UserPath) copies with splice(2); a kernel
// one (package kernel, chosen with the shim's Options.Datapath) redirects
// socket to socket without waking the shim.
//
// What any Datapath must report back, because in-flight accounting and
// connection reuse depend on it (the shim calls Model.Done when
// RelayResponseBody returns):
//   - RelayRequestBody returns only when the last byte of the request body
//     (by x.Request.Framing: Content-Length bytes, or chunks through the
//     zero-size chunk and trailers) has been written to Upstream, or on the
//     first error. Bytes past the body that were read from Client (a
//     pipelined next request) must be left in x.Client.Pending.
//   - RelayResponseBody returns only when the response body has ended by
//     x.Response.Framing (Content-Length reached, last chunk and trailers
//     written, or upstream EOF for close-delimited), or on the first error,
//     including either peer closing early: an error is how the shim learns
//     that the exchange ended abnormally and that neither socket may be
//     reused. It must not return before the end (a kernel path that
//     redirects asynchronously must wait for its end-of-body event) and
//     must not linger after it (the count would stay high).
//   - Both must honour x.Idle: a dead peer may never hang a client.
//   - Both must start by sending the Pending bytes of the source side,
//     which the shim read with the head and never hides.
//   - Both fill BodyBytesUp / BodyBytesDown with the bytes moved.
//
// Whatever the datapath, while a request is parked by admission and while
// its response head is pending and its body relayed, the shim reads the
// client socket in the background to notice a client that leaves
// (watch.go); bytes that read returns are appended to x.Client.Pending.
// A kernel datapath that redirects the client socket's bytes sees that
// read return EOF when the client closes, which is what it is for.
//
// An HTTP/1.0 client cannot read a chunked response: for it the shim
// relays the body itself, de-chunked, without calling RelayResponseBody.
type Datapath interface {
	// Name is "user" or "kernel": it appears in logs and counters.
	Name() string
	// RelayRequestBody moves the request body from x.Client to x.Upstream.
	RelayRequestBody(x *Exchange) error
	// RelayResponseBody moves the response body from x.Upstream to x.Client.
	RelayResponseBody(x *Exchange) error
	// Capabilities names the optional steps the datapath takes part in.
	Capabilities() Capabilities
}

// Capabilities are the optional steps of an exchange a Datapath takes part
// in (datapath_hooks.go), each a field the datapath fills with itself; a
// nil field is a step it leaves to the shim. Named fields, not type
// assertions: a method renamed on either side breaks the build instead of
// switching a feature off, and a type that embeds a Datapath (kernel.Path)
// keeps them.
type Capabilities struct {
	HeadReader   HeadReader
	HeadWaiter   HeadWaiter
	ConnPreparer ConnPreparer
	Carrier      ResponseCarrier
	Cutter       ResponseCutter
	Queued       QueuedRequest
	EarlyReader  EarlyAnswerReader
	// Userspace is the datapath when it is the userspace copy: it leaves
	// the replica socket plain to read after a failed request body, its
	// reads of a response bring the body's bytes, and the shim exports
	// its byte counts.
	Userspace *UserPath
}
