package kernel

import (
	"github.com/lmwarden/lmwarden/l7/http1"
	"github.com/lmwarden/lmwarden/maps"
)

// bodyFrame follows a response body by its framing in Go, as the kernel's
// parser (bpf/frame.h) does, so that the two can hand a body over to each
// other in the middle: the shim forwards the bytes it holds and gives the
// kernel the state after them (sock_ctl.start), or takes over where the
// kernel stopped (sock_state.fr). Chunked bodies use l7's one parser,
// whose phases the kernel's number alike (TestFramePhasesMatchL7).
type bodyFrame struct {
	kind      http1.Framing // FramingLength, FramingChunked or FramingClose
	remaining uint64        // FramingLength: bytes left
	chunks    http1.ChunkedBody
}

// frameOf starts the body of a response head's framing.
func frameOf(r *http1.ResponseHead) bodyFrame {
	switch r.Framing {
	case http1.FramingLength:
		return bodyFrame{kind: http1.FramingLength, remaining: uint64(r.ContentLength)}
	case http1.FramingChunked:
		return bodyFrame{kind: http1.FramingChunked}
	case http1.FramingClose:
		return bodyFrame{kind: http1.FramingClose}
	}
	return bodyFrame{kind: http1.FramingLength} // no body: done at once
}

// Done reports whether the body has ended.
func (f *bodyFrame) Done() bool {
	switch f.kind {
	case http1.FramingLength:
		return f.remaining == 0
	case http1.FramingChunked:
		return f.chunks.Done()
	}
	return false
}

// untilClose reports a body that only the upstream's close ends.
func (f *bodyFrame) untilClose() bool { return f.kind == http1.FramingClose }

// Feed advances over b and returns how many of its bytes belong to the
// body (all of them unless it ends inside b); a malformed chunked body is
// an error.
func (f *bodyFrame) Feed(b []byte) (int, error) {
	switch f.kind {
	case http1.FramingLength:
		n := min(f.remaining, uint64(len(b)))
		f.remaining -= n
		return int(n), nil
	case http1.FramingChunked:
		return f.chunks.Feed(b)
	}
	return len(b), nil
}

// kernel is f as the kernel's parser state.
func (f *bodyFrame) kernel() maps.Frame {
	switch f.kind {
	case http1.FramingLength:
		if f.remaining == 0 {
			return maps.Frame{Phase: maps.PhaseDone}
		}
		return maps.Frame{Phase: maps.PhaseLength, Remaining: f.remaining}
	case http1.FramingChunked:
		c := f.chunks
		return maps.Frame{Phase: uint32(c.Phase), Remaining: c.Remaining, Size: c.Size, Line: c.Line, Count: c.Count}
	}
	return maps.Frame{Phase: maps.PhaseUntilClose}
}

// frameFromKernel is the kernel's parser state k as a bodyFrame (where the
// kernel stopped carrying a body, the shim goes on).
func frameFromKernel(k maps.Frame) bodyFrame {
	switch {
	case k.Phase == maps.PhaseLength:
		return bodyFrame{kind: http1.FramingLength, remaining: k.Remaining}
	case k.Phase == maps.PhaseUntilClose:
		return bodyFrame{kind: http1.FramingClose}
	case k.Phase == maps.PhaseDone:
		return bodyFrame{kind: http1.FramingLength}
	}
	return bodyFrame{kind: http1.FramingChunked, chunks: http1.ChunkedBody{
		Phase: http1.ChunkPhase(k.Phase), Remaining: k.Remaining, Size: k.Size, Line: k.Line, Count: k.Count,
	}}
}
