package kernel

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/lmwarden/lmwarden/maps"
)

// The sk_msg datapath carries a response only over an upstream connection
// whose replica end paired (lmw_pair put it into lmw_replica_socks). On
// Debian 13 backports' 7.3 kernel it never pairs: the datapath loads and
// is correct, but the kernel carries nothing and the shim relays every
// byte, so the self-test refuses it. ProbePairing proves that one step on
// its own, cheaply: the self-test runs it first, and the tests of the
// msg datapath skip with its reason where it fails (docs/kernel.md,
// "Kernels tested"), the way a kernel without a feature is skipped.

// ErrUnpaired: the kernel did not pair a loopback connection the
// datapath's own dialer made; msg would carry no byte here.
var ErrUnpaired = errors.New("the replica's end of a loopback connection through the warden's dialer did not pair (lmw_pair did not put it into lmw_replica_socks): on this kernel msg carries no byte of a response")

// probeBound bounds the wait for the pairing (the kernel pairs the
// replica's end as its handshake completes: in microseconds, a VM under
// emulation included).
const probeBound = 2 * time.Second

// ProbePairing dials a loopback listener of its own through p's upstream
// dialer and reports ErrUnpaired when the replica's end does not pair
// within probeBound; nil for a datapath other than msg.
func (p *Path) ProbePairing() error {
	if p.State.Mode() != maps.ModeMsg {
		return nil
	}
	lc := net.ListenConfig{}
	lc.SetMultipathTCP(false) // a sockmap refuses MPTCP sockets
	l, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("pairing probe: %w", err)
	}
	ln := l.(*net.TCPListener)
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), probeBound)
	defer cancel()
	up, release, err := p.Upstreams.DialTCP(ctx, ln.Addr().String())
	if err != nil {
		return fmt.Errorf("pairing probe: %w", err)
	}
	defer release()
	defer up.Close()
	_ = ln.SetDeadline(time.Now().Add(probeBound))
	acc, err := ln.AcceptTCP()
	if err != nil {
		return fmt.Errorf("pairing probe: %w", err)
	}
	defer acc.Close()
	cookie, err := maps.Cookie(up)
	if err != nil {
		return fmt.Errorf("pairing probe: %w", err)
	}
	for deadline := time.Now().Add(probeBound); !p.State.Paired(cookie); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			return ErrUnpaired
		}
	}
	return nil
}
