package l7

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"
	"time"

	"github.com/lmwarden/lmwarden/l7/datapath"
	"github.com/lmwarden/lmwarden/l7/http1"
)

// A response cut in the middle (the replica died, or was ended as stalled
// on an unhealthy replica) must not look like a short but whole reply.
// Where the client has a streamed response under way (server-sent events,
// chunked or delimited by the close) and the bytes it got end between two
// chunks, the shim sends the API's own error event, then ends the body
// properly: the SDKs raise it as an error (Anthropic's "event: error",
// OpenAI's error chunk, the one vLLM itself sends). Elsewhere (the middle
// of a chunk, a body with a Content-Length) it closes the connection, and
// the client's HTTP parser reports the body incomplete.
//
// Which datapath sent the client its bytes decides who knows where they
// end: in user mode the shim's own chunked parser; where the kernel
// carried the response (sk_msg, sk_skb) the kernel's parser, which the
// datapath reads back after it stopped the kernel (ResponseCutter).

// atChunkBoundary reports a parser between two chunks (a chunk may follow).
func atChunkBoundary(p *http1.ChunkedBody) bool {
	return p.Phase == http1.ChunkSize && p.Count == 0 && p.Line == 0
}

// cutState is what the shim itself knows of x's response, with what a
// kernel datapath says of the bytes it carried.
func (s *Shim) cutState(x *exchange) datapath.CutState {
	cs := datapath.CutState{Began: x.responseBegan}
	if x.Response != nil {
		cs.Chunked = x.Response.Framing == http1.FramingChunked
	}
	if p, ok := x.ResponseFrame(); ok {
		cs.AtBoundary = cs.Chunked && atChunkBoundary(&p)
	}
	if kc, known := x.recordedCut(); known {
		cs.Began = cs.Began || kc.Began
		cs.Chunked, cs.AtBoundary = kc.Chunked, kc.AtBoundary
	}
	return cs
}

// recordCut asks a kernel datapath, once, to stop carrying x's response
// and say where it stands, before x's replica connection closes: closing
// it drops the kernel's record of the connection.
func (s *Shim) recordCut(x *exchange) {
	c := s.caps.Cutter
	if c == nil {
		return
	}
	x.mu.Lock()
	if x.cutAsked {
		x.mu.Unlock()
		return
	}
	x.cutAsked = true
	x.mu.Unlock()
	cs, known := c.CutResponse(&x.Exchange)
	x.mu.Lock()
	x.cut, x.cutKnown, x.cutDone = cs, known, true
	x.mu.Unlock()
}

// recordedCut is what recordCut learnt (known false: nothing, or not yet).
func (x *exchange) recordedCut() (datapath.CutState, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.cut, x.cutDone && x.cutKnown
}

// cutRecorded reports whether recordCut ran for x (the kernel is stopped).
func (x *exchange) cutRecorded() bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.cutDone
}

// endCutStream ends the client's side of a response that was cut by the
// replica side (cause), with the API's error event where it can; it
// reports whether it sent one. The connection closes after it either way.
func (s *Shim) endCutStream(x *exchange, cause error) bool {
	cs := s.cutState(x)
	a := shapeOf(x.Request)
	if !cs.Began || a == apiNone || !s.streamed(x, cs) {
		return false
	}
	why := fmt.Sprintf("the stream from replica %d ended early: %s", x.Replica, cutCause(x, cause))
	ev := errorEvent(a, 502, "lmwarden: "+why+"; the reply is incomplete")
	var err error
	switch {
	case cs.Chunked && cs.AtBoundary:
		_, err = x.Client.WriteAll(time.Second, chunk(ev), []byte("0\r\n\r\n"))
	case !cs.Chunked && x.Response != nil && x.Response.Framing == http1.FramingClose:
		_, err = x.Client.WriteAll(time.Second, ev)
	default:
		return false
	}
	return err == nil
}

// streamed reports a response of server-sent events: the head said so, or
// (a head only the kernel read) a chunked body on a streaming API path:
// vLLM answers non-streamed requests with a Content-Length.
func (s *Shim) streamed(x *exchange, cs datapath.CutState) bool {
	if x.Response != nil && x.Response.Headers != nil {
		for _, f := range x.Response.Headers {
			if strings.EqualFold(f.Name, "Content-Type") {
				return strings.HasPrefix(strings.ToLower(strings.TrimSpace(f.Value)), "text/event-stream")
			}
		}
		return false
	}
	return cs.Chunked
}

// cutCause says why the stream ended, for the client and the log.
func cutCause(x *exchange, err error) string {
	if r := x.aborted(); r != notAborted {
		return r.String()
	}
	switch {
	case err == nil:
		return "the replica closed the connection"
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
		return "the replica closed the connection in the middle of the response"
	case errors.Is(err, syscall.ECONNRESET):
		return "the replica reset the connection"
	}
	return err.Error()
}
