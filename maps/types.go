package maps

import "github.com/lmwarden/lmwarden/bpf"

// The shared structs, defined once in bpf/lmwarden.h.
type (
	Session       = bpf.LmwardenSession
	SockCtl       = bpf.LmwardenSockCtl
	SockState     = bpf.LmwardenSockState
	ReplicaStats  = bpf.LmwardenReplicaStats
	ResponseEnd   = bpf.LmwardenResponseEnd
	FrontendKey   = bpf.LmwardenFrontendKey
	FrontendValue = bpf.LmwardenFrontendValue
	ConnKey       = bpf.LmwardenConnKey
	OwnConn       = bpf.LmwardenOwnConn
	DispatchStats = bpf.LmwardenDispatchStats
)

// Socket modes (enum sock_mode) and parse phases (enum parse_phase).
const (
	ModePass     = uint32(bpf.LmwardenSockModeSOCK_PASS)
	ModeRequest  = uint32(bpf.LmwardenSockModeSOCK_REQUEST)
	ModeResponse = uint32(bpf.LmwardenSockModeSOCK_RESPONSE)

	PhaseUntilClose = uint32(bpf.LmwardenParsePhasePH_UNTIL_CLOSE)
	PhaseDone       = uint32(bpf.LmwardenParsePhasePH_DONE)
)

// Flags mirrored from lmwarden.h #defines (bpf2go only carries types).
const (
	FrontendOwnAddr = 1 // FRONTEND_OWN_ADDR
	CtlNoBody       = 1 // CTL_NO_BODY
	CtlTailPass     = 2 // CTL_TAIL_PASS
	CtlRearm        = 4 // CTL_REARM
	CtlNotify       = 8 // CTL_NOTIFY
	EndFramed       = 1 // END_FRAMED
	EndBody         = 2 // END_BODY
	EndTail         = 4 // END_TAIL
)

// Pin names inside the state directory.
const (
	pinDispatchLink = "link_dispatch"
	pinVerdictLink  = "link_verdict"
)
