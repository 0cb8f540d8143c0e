package kernel

import (
	"errors"
	"testing"
	"time"

	"github.com/lmwarden/lmwarden/internal/testnet"
)

// A peer that resets the connection drops whatever was still to be sent:
// waitWritten must say so at once, not wait out its timeout for bytes
// that will never be queued (an exchange waiting there stays in flight).
func TestWaitWrittenFailsOnceThePeerReset(t *testing.T) {
	ln := testnet.Listen(t, "127.0.0.1:0")
	c := testnet.Dial(t, ln.Addr().String())
	peer, err := ln.AcceptTCP()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("queued")); err != nil {
		t.Fatal(err)
	}
	n, err := written(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := waitWritten(c, n, time.Minute); err != nil {
		t.Fatalf("bytes already queued: %v", err)
	}
	peer.SetLinger(0)
	peer.Close() // a reset
	// More than was ever queued: what the psock's worker had not handed
	// over yet when the reset came.
	err = waitWritten(c, n+1000, time.Minute)
	if !errors.Is(err, errPeerClosed) {
		t.Fatalf("waitWritten after the peer's reset: %v, want %v", err, errPeerClosed)
	}
}
