package maps

import "github.com/lmwarden/lmwarden/bpf"

// The shared structs, defined once in bpf/lmwarden.h.
type (
	Session       = bpf.LmwardenSession
	SockCtl       = bpf.LmwardenSockCtl
	SockState     = bpf.LmwardenSockState
	Frame         = bpf.LmwardenFrame
	ReplicaStats  = bpf.LmwardenReplicaStats
	ResponseEnd   = bpf.LmwardenResponseEnd
	FrontendKey   = bpf.LmwardenFrontendKey
	FrontendValue = bpf.LmwardenFrontendValue
	ConnKey       = bpf.LmwardenConnKey
	OwnConn       = bpf.LmwardenOwnConn
)

// Socket modes (enum sock_mode).
const (
	ModePass     = uint32(bpf.LmwardenSockModeSOCK_PASS)
	ModeRequest  = uint32(bpf.LmwardenSockModeSOCK_REQUEST)
	ModeResponse = uint32(bpf.LmwardenSockModeSOCK_RESPONSE)
	ModeReply    = uint32(bpf.LmwardenSockModeSOCK_REPLY)
)

// Framing phases (enum frame_phase) that are not chunked-body phases; those
// number like http1.ChunkPhase (FR_CHUNK_SIZE = 0 ... FR_ERROR).
const (
	PhaseChunkSize  = uint32(bpf.LmwardenFramePhaseFR_CHUNK_SIZE)
	PhaseDone       = uint32(bpf.LmwardenFramePhaseFR_DONE)
	PhaseError      = uint32(bpf.LmwardenFramePhaseFR_ERROR)
	PhaseLength     = uint32(bpf.LmwardenFramePhaseFR_LENGTH)
	PhaseUntilClose = uint32(bpf.LmwardenFramePhaseFR_UNTIL_CLOSE)
	PhaseHead       = uint32(bpf.LmwardenFramePhaseFR_HEAD)
)

// Flags and reasons mirrored from lmwarden.h #defines (bpf2go only carries
// types); kernel/defines_test.go fails when one differs from its #define.
const (
	FrontendOwnAddr  = 1  // FRONTEND_OWN_ADDR
	OwnPair          = 1  // OWN_PAIR
	CtlNoBody        = 1  // CTL_NO_BODY
	CtlTailPass      = 2  // CTL_TAIL_PASS
	CtlRearm         = 4  // CTL_REARM
	CtlNotify        = 8  // CTL_NOTIFY
	CtlHandoff       = 16 // CTL_HANDOFF
	CtlFaultCarryEnd = 32 // CTL_FAULT_CARRY_END (fault injection, tests only)
	EndFramed        = 1  // END_FRAMED
	EndBody          = 2  // END_BODY
	HaltHead         = 1  // HALT_HEAD
	HaltCredit       = 2  // HALT_CREDIT
	HaltFraming      = 3  // HALT_FRAMING
	HaltPeer         = 4  // HALT_PEER
	HaltPull         = 5  // HALT_PULL
	HaltHandoff      = 6  // HALT_HANDOFF
	HaltTrailing     = 7  // HALT_TRAILING
	HeadLength       = 1  // HF_LENGTH
	HeadChunked      = 2  // HF_CHUNKED
	MaxHead          = 4096
)
