package http1

import "errors"

// MaxChunkLine bounds a chunk-size or trailer line.
const MaxChunkLine = 4096

var ErrBadChunk = errors.New("l7: malformed chunked body")

// ChunkPhase is where a ChunkedBody is in the chunked framing.
type ChunkPhase uint32

// The phases, in the order of a chunk. The kernel datapath's BPF parser
// (bpf/frame.h) has one state for each and moves between them on exactly
// the same bytes.
const (
	ChunkSize         ChunkPhase = iota // hex digits of a chunk size
	ChunkSizeBWS                        // blanks after the size: only an extension may follow
	ChunkExt                            // a chunk extension, up to CR
	ChunkSizeLF                         // the LF of a size line
	ChunkData                           // chunk data: Remaining bytes
	ChunkDataCR                         // the CR after chunk data
	ChunkDataLF                         // the LF after chunk data
	ChunkTrailer                        // the start of a trailer line, or of the final CRLF
	ChunkTrailerName                    // a trailer field name, up to its colon
	ChunkTrailerValue                   // a trailer field value, up to CR
	ChunkTrailerLF                      // the LF of a trailer line
	ChunkFinalLF                        // the LF of the final empty line
	ChunkDone                           // the body has ended
	ChunkError                          // the framing is malformed
)

// Bounds on a chunked body's framing. A line (a size line with its
// extensions, or a trailer line) is at most MaxChunkLine bytes with its CRLF; the
// last-chunk line and the trailers after it at most MaxHeadBytes together.
const maxChunkDigits = 15

// ChunkedBody follows a chunked body (RFC 9112 section 7.1) through its
// framing, one byte at a time except for chunk data, which it skips. It is
// strict wherever two parsers could disagree about where a body ends: a
// size of 1 to 15 hex digits, blanks after it only before an extension, no
// control bytes in a line, CRLF everywhere (a bare CR or LF is an error),
// CRLF right after the data, trailer lines that are header fields, and the
// bounds above. Its result never depends on how the input was split: every
// byte moves it by the same rule (FuzzChunkedSplits checks this, and that
// the kernel's parser ends at the same byte).
//
// The zero value is at the start of a body.
type ChunkedBody struct {
	Phase     ChunkPhase
	Remaining uint64 // ChunkData: data bytes left in this chunk
	Size      uint64 // the chunk size read so far
	Line      uint32 // bytes of the current line so far
	Count     uint32 // ChunkSize*: hex digits; trailers: bytes since the last-chunk line began
}

// Done reports whether the body has ended.
func (p *ChunkedBody) Done() bool { return p.Phase == ChunkDone }

// InData reports whether the next bytes are chunk data (Remaining of them).
func (p *ChunkedBody) InData() bool { return p.Phase == ChunkData }

// Skip consumes n bytes of chunk data moved without Feed (with splice(2));
// n must not exceed Remaining.
func (p *ChunkedBody) Skip(n uint64) {
	p.Remaining -= n
	if p.Remaining == 0 {
		p.Phase = ChunkDataCR
	}
}

// Feed consumes b up to the end of the body, or up to the first byte that
// breaks the framing (then it returns errBadChunk, with n that byte's
// index). n is the bytes that belong to the body: all of b, unless the
// body ends inside it.
func (p *ChunkedBody) Feed(b []byte) (n int, err error) {
	for n < len(b) {
		k, _, err := p.Next(b[n:])
		n += k
		if err != nil || p.Done() {
			return n, err
		}
	}
	return n, nil
}

// Next consumes the longest run at the start of b that is all chunk data
// (data true) or all framing (data false), and returns its length. It stops
// early at the end of the body, or at a malformed byte (errBadChunk).
func (p *ChunkedBody) Next(b []byte) (n int, data bool, err error) {
	if p.Phase == ChunkData {
		k := min(p.Remaining, uint64(len(b)))
		p.Skip(k)
		return int(k), true, nil
	}
	for n < len(b) && p.Phase != ChunkData {
		switch p.step(b[n]) {
		case stepError:
			return n, false, ErrBadChunk
		case stepDone:
			return n + 1, false, nil
		}
		n++
	}
	return n, false, nil
}

type stepResult int

const (
	stepMore stepResult = iota
	stepDone
	stepError
)

// step moves the parser over one framing byte.
func (p *ChunkedBody) step(c byte) stepResult {
	if p.Phase == ChunkDone {
		return stepDone
	}
	if p.Phase == ChunkError {
		return stepError
	}
	p.Line++
	if p.Line > MaxChunkLine {
		return p.fail()
	}
	if p.Phase >= ChunkTrailer {
		p.Count++
		if p.Count > MaxHeadBytes {
			return p.fail()
		}
	}
	switch p.Phase {
	case ChunkSize:
		switch h := hexDigit(c); {
		case h >= 0:
			if p.Count == maxChunkDigits {
				return p.fail()
			}
			p.Count++
			p.Size = p.Size<<4 | uint64(h)
		case p.Count == 0:
			return p.fail()
		case c == ';':
			p.Phase = ChunkExt
		case c == ' ' || c == '\t':
			p.Phase = ChunkSizeBWS
		case c == '\r':
			p.Phase = ChunkSizeLF
		default:
			return p.fail()
		}
	case ChunkSizeBWS:
		switch c {
		case ' ', '\t':
		case ';':
			p.Phase = ChunkExt
		default:
			return p.fail()
		}
	case ChunkExt:
		switch {
		case c == '\r':
			p.Phase = ChunkSizeLF
		case isCTL(c):
			return p.fail()
		}
	case ChunkSizeLF:
		if c != '\n' {
			return p.fail()
		}
		if p.Size == 0 {
			p.Phase, p.Count, p.Line = ChunkTrailer, p.Line, 0
			return stepMore
		}
		p.Phase, p.Remaining = ChunkData, p.Size
	case ChunkDataCR:
		if c != '\r' {
			return p.fail()
		}
		p.Phase = ChunkDataLF
	case ChunkDataLF:
		if c != '\n' {
			return p.fail()
		}
		*p = ChunkedBody{} // the next chunk's size line
	case ChunkTrailer:
		switch {
		case c == '\r':
			p.Phase = ChunkFinalLF
		case c < 0x80 && tokenChar[c]:
			p.Phase = ChunkTrailerName
		default: // obs-fold, an empty name, anything else
			return p.fail()
		}
	case ChunkTrailerName:
		switch {
		case c == ':':
			p.Phase = ChunkTrailerValue
		case c >= 0x80 || !tokenChar[c]:
			return p.fail()
		}
	case ChunkTrailerValue:
		switch {
		case c == '\r':
			p.Phase = ChunkTrailerLF
		case isCTL(c):
			return p.fail()
		}
	case ChunkTrailerLF:
		if c != '\n' {
			return p.fail()
		}
		p.Phase, p.Line = ChunkTrailer, 0
	case ChunkFinalLF:
		if c != '\n' {
			return p.fail()
		}
		p.Phase = ChunkDone
		return stepDone
	}
	if p.Phase == ChunkData {
		p.Line = 0
	}
	return stepMore
}

func (p *ChunkedBody) fail() stepResult {
	p.Phase = ChunkError
	return stepError
}

// isCTL reports a control byte other than HTAB (DEL included): none may
// appear in a size line's extension or a trailer value.
func isCTL(c byte) bool { return (c < ' ' && c != '\t') || c == 0x7f }

func hexDigit(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}
