package l7

import (
	"log/slog"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// A draining shim stops its listeners' intake without resetting their
// queues. Closing a listening socket resets every connection the kernel
// has completed but the process has not accepted yet, and such a client
// may well have sent its request already: on SIGTERM under load that is
// a lost request. So Close first makes each listener drop new SYNs (the
// client's connect retries its SYN a second later and is refused by
// then, having sent nothing), the accept loop goes on taking what is
// queued and serves it as any connection of the drain (answered with
// Connection: close), and the listener closes once nothing more has come
// for acceptLinger (or at the drain grace's end).

// acceptLinger is how long a draining accept loop waits for one more
// queued connection: a handshake the kernel began before the SYNs were
// dropped completes within a round trip.
const acceptLinger = 50 * time.Millisecond

// synDrop is a classic BPF socket filter that drops a segment with SYN
// set and ACK clear (a new connection's first packet) and lets every
// other through. A TCP socket's filter sees the segment from its TCP
// header, whose byte 13 holds the flags. Accepted sockets inherit it
// (harmless: an established socket has no use for a bare SYN).
var synDrop = []unix.SockFilter{
	{Code: unix.BPF_LD | unix.BPF_B | unix.BPF_ABS, K: 13},
	{Code: unix.BPF_ALU | unix.BPF_AND | unix.BPF_K, K: 0x12}, // SYN|ACK
	{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: 0x02, Jt: 0, Jf: 1},
	{Code: unix.BPF_RET | unix.BPF_K, K: 0},
	{Code: unix.BPF_RET | unix.BPF_K, K: 0xffffffff},
}

// dropSYNs attaches synDrop to a listener.
func dropSYNs(ln *net.TCPListener) error {
	rc, err := ln.SyscallConn()
	if err != nil {
		return err
	}
	prog := unix.SockFprog{Len: uint16(len(synDrop)), Filter: &synDrop[0]}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptSockFprog(int(fd), unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &prog)
	}); err != nil {
		return err
	}
	return serr
}

// shutIntake stops ln taking new connections and has its accept loop
// take the queued ones until acceptLinger passes without one. Call with
// mu, after closing is set.
func (s *Shim) shutIntake(ln *net.TCPListener) {
	if err := dropSYNs(ln); err != nil {
		// New connections keep coming until the linger ends: served too.
		s.log.Warn("draining: new connections not held off", "err", err)
	}
	_ = ln.SetDeadline(s.lingerDeadline())
}

// lingerDeadline is when a draining accept loop stops waiting for the
// next queued connection. Call with mu, or once closing is set (drainBy
// is fixed then).
func (s *Shim) lingerDeadline() time.Time {
	if t := time.Now().Add(acceptLinger); t.Before(s.drainBy) {
		return t
	}
	return s.drainBy
}

// acceptQueued takes every connection still queued on ln without
// waiting: past ln's deadline Go refuses an Accept before it asks the
// kernel, so this asks the kernel itself (the listener is non-blocking:
// EAGAIN once the queue is empty).
func acceptQueued(ln *net.TCPListener, log *slog.Logger) []*net.TCPConn {
	rc, err := ln.SyscallConn()
	if err != nil {
		return nil
	}
	var fds []int
	_ = rc.Control(func(fd uintptr) {
		for {
			nfd, _, err := unix.Accept4(int(fd), unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
			if err == unix.EINTR || err == unix.ECONNABORTED {
				continue
			}
			if err != nil {
				return
			}
			fds = append(fds, nfd)
		}
	})
	var out []*net.TCPConn
	for _, fd := range fds {
		f := os.NewFile(uintptr(fd), "queued connection")
		c, err := net.FileConn(f) // a dup, in Go's poller
		f.Close()
		tc, ok := c.(*net.TCPConn)
		if err != nil || !ok {
			log.Warn("draining: a queued connection could not be served", "err", err)
			if c != nil {
				c.Close()
			}
			continue
		}
		out = append(out, tc)
	}
	return out
}
