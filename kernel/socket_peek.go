package kernel

import (
	"errors"
	"io"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// peekReader reads what a connection has received without consuming it
// (MSG_PEEK). The shim reads the first request head through it, so the
// kernel later sees every byte of the stream exactly once: measured on
// 6.18, a socket put into a sockmap after a segment was partly read has the
// whole segment verdicted again (tcp_read_skb ignores the read offset), so
// the read part would reach the upstream twice. The verdict drops the
// peeked bytes instead (sock_ctl.arm_at).
type peekReader struct {
	raw syscall.RawConn
	c   *net.TCPConn
	off int
	buf []byte
}

// newPeekReader peeks at c from its first unread byte.
func newPeekReader(c *net.TCPConn) (*peekReader, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	return &peekReader{raw: raw, c: c}, nil
}

// Peeked is how many bytes Read has returned so far.
func (r *peekReader) Peeked() uint64 { return uint64(r.off) }

// Read returns the next received bytes, waiting for more to arrive.
func (r *peekReader) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	want := r.off + len(b)
	if cap(r.buf) < want {
		r.buf = append(r.buf[:cap(r.buf)], make([]byte, want-cap(r.buf))...)
	}
	r.buf = r.buf[:want]
	var n int
	var rerr error
	err := r.raw.Read(func(fd uintptr) bool {
		n, _, rerr = unix.Recvfrom(int(fd), r.buf, unix.MSG_PEEK|unix.MSG_DONTWAIT)
		if errors.Is(rerr, unix.EAGAIN) {
			return false
		}
		if rerr == nil && n > 0 && n <= r.off {
			// Nothing new: wait for the next arrival, unless the peer
			// already sent its FIN (then nothing new will come).
			if info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); err == nil &&
				info.State != unix.BPF_TCP_ESTABLISHED {
				n = 0
				return true
			}
			return false
		}
		return true
	})
	if err != nil {
		return 0, err
	}
	if rerr != nil {
		return 0, rerr
	}
	if n <= r.off {
		return 0, io.EOF
	}
	k := copy(b, r.buf[r.off:n])
	r.off += k
	return k, nil
}

// waitReadable waits, without consuming anything, until c has a byte to
// read or the peer closed (io.EOF); c's read deadline applies.
func waitReadable(c *net.TCPConn) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var one [1]byte
	var n int
	var rerr error
	err = raw.Read(func(fd uintptr) bool {
		n, _, rerr = unix.Recvfrom(int(fd), one[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		return !errors.Is(rerr, unix.EAGAIN)
	})
	if err != nil {
		return err
	}
	if rerr != nil {
		return rerr
	}
	if n == 0 {
		return io.EOF
	}
	return nil
}
