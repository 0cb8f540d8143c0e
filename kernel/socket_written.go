package kernel

import (
	"errors"
	"net"
	"time"

	"golang.org/x/sys/unix"
)

// written reports how many bytes were ever queued for sending on c:
// acknowledged plus still in the send queue. The kernel's redirected
// bytes reach a socket through a per-socket worker (the psock backlog), so
// this is how the shim learns they have landed before it writes itself.
func written(c *net.TCPConn) (uint64, error) {
	n, _, err := writtenState(c)
	return n, err
}

// writtenState is written with the socket's TCP state.
func writtenState(c *net.TCPConn) (uint64, uint8, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, 0, err
	}
	var n uint64
	var state uint8
	var gerr error
	err = raw.Control(func(fd uintptr) {
		// The two counts are read apart: an ACK between them moves bytes
		// from the send queue to the acknowledged count, and the sum
		// comes out short by what it acknowledged. Short is not safe: as
		// the count before the kernel's bytes, it would let the shim
		// write (or take the client out of the SOCKHASH, dropping what
		// its psock still holds) before they landed. So the ACK count
		// is read on both sides of the send queue's, until it held.
		for {
			before, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
			if err != nil {
				gerr = err
				return
			}
			outq, err := unix.IoctlGetInt(int(fd), unix.SIOCOUTQ)
			if err != nil {
				gerr = err
				return
			}
			after, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
			if err != nil {
				gerr = err
				return
			}
			if before.Bytes_acked == after.Bytes_acked {
				n, state = after.Bytes_acked+uint64(outq), after.State
				return
			}
		}
	})
	if err != nil {
		return 0, 0, err
	}
	return n, state, gerr
}

var (
	errDrainTimeout = errors.New("kernel: redirected bytes were not delivered in time")
	// errPeerClosed: the socket closed (the peer reset it, say a client
	// that left mid-stream) before the redirected bytes reached it; they
	// never will (its send queue was dropped).
	errPeerClosed = errors.New("kernel: socket closed before the redirected bytes reached it")
)

// waitWritten waits until at least want bytes were queued on c, so that
// bytes the shim writes next cannot overtake bytes the kernel carried. It
// fails at once when c has closed: a peer that reset it (a client that
// left while the kernel still had bytes on their way to it) stops the
// psock's worker, so the count would never be reached, and the exchange
// waiting here would stay in flight for the whole timeout.
func waitWritten(c *net.TCPConn, want uint64, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	pause := 20 * time.Microsecond
	for {
		n, state, err := writtenState(c)
		if err != nil {
			return err
		}
		if n >= want {
			return nil
		}
		if state == unix.BPF_TCP_CLOSE {
			return errPeerClosed
		}
		if time.Now().After(deadline) {
			return errDrainTimeout
		}
		// Polled, up to every 250 µs: the wait is the psock worker's
		// (no event says when it sent), and it holds back a response's
		// last bytes (end p50 was 1.2-2.2 ms at 32 streams with a 2 ms cap).
		time.Sleep(pause)
		if pause < 250*time.Microsecond {
			pause *= 2
		}
	}
}

// drainQueued reads, without blocking, everything c has received, so that
// no segment is left half read when c joins the sockmap (see peekReader).
func drainQueued(c *net.TCPConn) ([]byte, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var out []byte
	buf := make([]byte, 64<<10)
	var rerr error
	err = raw.Read(func(fd uintptr) bool {
		for {
			n, _, err := unix.Recvfrom(int(fd), buf, unix.MSG_DONTWAIT)
			if n > 0 {
				out = append(out, buf[:n]...)
				continue
			}
			if err != nil && !errors.Is(err, unix.EAGAIN) {
				rerr = err
			}
			return true
		}
	})
	if err != nil {
		return out, err
	}
	return out, rerr
}

// verdictQueued runs the verdict over the segments c received before it
// joined the SOCKHASH, now, without reading: setting SO_RCVLOWAT makes TCP
// signal data ready. A read would run the verdict too, but inside the
// read, which then sets the socket's read position back over the bytes
// the verdict carried (tcp_bpf_recvmsg_parser keeps copied_seq from before
// the verdict, measured on 6.18): harmless while the socket stays in the
// map, but a socket that leaves it (Detach) could not be read again.
func verdictQueued(c *net.TCPConn) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	err = raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVLOWAT, 1)
	})
	if err != nil {
		return err
	}
	return serr
}
