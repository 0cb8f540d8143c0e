package maps

import "github.com/lmwarden/lmwarden/bpf"

// BodyFraming follows a response body through the same states as the
// verdict's parser (lmwarden.c parse_step), so that the shim can forward
// the first body bytes itself and then hand the kernel the exact state
// after them (SockCtl.Start*).
type BodyFraming struct {
	Phase     uint32
	LinePos   uint32
	Remaining uint64
	Acc       uint64
}

// Phases of enum parse_phase the shim starts a body in.
const (
	PhaseCLBody    = uint32(bpf.LmwardenParsePhasePH_CL_BODY)
	PhaseChunkSize = uint32(bpf.LmwardenParsePhasePH_CHUNK_SIZE)
	phaseChunkExt  = uint32(bpf.LmwardenParsePhasePH_CHUNK_EXT)
	phaseChunkData = uint32(bpf.LmwardenParsePhasePH_CHUNK_DATA)
	phaseTrailer   = uint32(bpf.LmwardenParsePhasePH_TRAILER)
)

// LengthBody starts a Content-Length body of n bytes.
func LengthBody(n uint64) BodyFraming {
	if n == 0 {
		return BodyFraming{Phase: PhaseDone}
	}
	return BodyFraming{Phase: PhaseCLBody, Remaining: n}
}

// ChunkedBody starts a chunked body.
func ChunkedBody() BodyFraming { return BodyFraming{Phase: PhaseChunkSize} }

// CloseBody starts a body that ends when the upstream closes.
func CloseBody() BodyFraming { return BodyFraming{Phase: PhaseUntilClose} }

// Done reports whether the body has ended.
func (f *BodyFraming) Done() bool { return f.Phase == PhaseDone }

func hexval(c byte) int {
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

func (f *BodyFraming) sizeLineEnd() {
	if f.Acc == 0 {
		f.Phase, f.LinePos = phaseTrailer, 0
		return
	}
	f.Remaining, f.Phase = f.Acc+2, phaseChunkData
}

// Feed advances over b and returns how many of its bytes belong to the
// body (all of them unless the body ends inside b).
func (f *BodyFraming) Feed(b []byte) int {
	i := 0
	for i < len(b) {
		switch f.Phase {
		case PhaseDone:
			return i
		case PhaseUntilClose:
			return len(b)
		case PhaseCLBody, phaseChunkData:
			n := min(f.Remaining, uint64(len(b)-i))
			i += int(n)
			f.Remaining -= n
			if f.Remaining == 0 {
				if f.Phase == PhaseCLBody {
					f.Phase = PhaseDone
					return i
				}
				f.Phase, f.Acc = PhaseChunkSize, 0
			}
			continue
		}
		c := b[i]
		i++
		switch f.Phase {
		case PhaseChunkSize:
			if h := hexval(c); h >= 0 {
				if f.Acc < 1<<40 {
					f.Acc = f.Acc*16 + uint64(h)
				}
			} else if c == '\n' {
				f.sizeLineEnd()
			} else if c != '\r' {
				f.Phase = phaseChunkExt
			}
		case phaseChunkExt:
			if c == '\n' {
				f.sizeLineEnd()
			}
		case phaseTrailer:
			if c == '\n' {
				if f.LinePos == 0 {
					f.Phase = PhaseDone
					return i
				}
				f.LinePos = 0
			} else if c != '\r' {
				f.LinePos++
			}
		}
	}
	return i
}

// Ctl fills the Start* fields of a RESPONSE SockCtl from f.
func (f BodyFraming) Ctl(ctl *SockCtl) {
	ctl.StartPhase, ctl.StartLinePos, ctl.StartRemaining, ctl.StartAcc = f.Phase, f.LinePos, f.Remaining, f.Acc
}
