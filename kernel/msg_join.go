package kernel

import (
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lmwarden/lmwarden/l7/datapath"
	"github.com/lmwarden/lmwarden/maps"
)

// msgUpstream is what the sk_msg datapath keeps with an upstream
// connection (in its datapath.Conn.Datapath): only the exchange that holds the
// connection touches it.
type msgUpstream struct {
	cookie uint64
	paired bool // its replica end is in lmw_replica_socks
	// next is the stream offset after the last response, when the kernel
	// carried it to its end (else it is read from sock_state at the arm).
	next      uint64
	nextKnown bool
	// ctl is the last arm (its gen and stream offset; the shim alone
	// writes sock_ctls), and armed says it is the current exchange's
	// (Disarm, which the shim's client watch may call too, reads them).
	ctl   maps.SockCtl
	armed atomic.Bool
}

// upstream returns the connection's record, pairing it the first time:
// its replica end must have joined lmw_replica_socks.
func (k *MsgPath) upstream(c *datapath.Conn, replica string) (*msgUpstream, error) {
	if u, ok := c.Datapath.(*msgUpstream); ok {
		return u, nil
	}
	cookie, err := maps.Cookie(c.TCPConn)
	if err != nil {
		return nil, err
	}
	u := &msgUpstream{cookie: cookie}
	c.Datapath = u
	for deadline := time.Now().Add(pairWait); ; time.Sleep(100 * time.Microsecond) {
		if u.paired = k.st.Paired(cookie); u.paired || time.Now().After(deadline) {
			break
		}
	}
	if !u.paired {
		k.unpaired(replica)
		return u, nil
	}
	// Nothing has come from the replica yet: its stream starts at 0.
	if err := k.st.NewSocketState(cookie, 0); err != nil {
		return nil, err
	}
	u.nextKnown = true
	return u, nil
}

// msgClient is what the sk_msg datapath keeps with a client connection.
type msgClient struct{ cookie uint64 }

// client returns the client's cookie. Its socket must be in
// lmw_client_socks (it stays until it closes): lmw_pair put it there
// during the handshake (a connection to a frontend), else it joins here,
// the first time. Its send buffer is made as large as autotuning would
// let it grow: the kernel's redirects may not overfill it
// (sock_ctl.credit), so a larger one carries more of a response in the
// kernel.
func (k *MsgPath) client(c *datapath.Conn) (uint64, error) {
	if mc, ok := c.Datapath.(*msgClient); ok {
		return mc.cookie, nil
	}
	cookie, err := maps.Cookie(c.TCPConn)
	if err != nil {
		return 0, err
	}
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	raw.Control(func(fd uintptr) {
		// SO_SNDBUFFORCE takes half the size (the kernel doubles it); a
		// warden without CAP_NET_ADMIN... has none of this datapath.
		_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, k.sndbuf/2)
	})
	if !k.st.ClientInMap(cookie) {
		if err := k.st.AddClient(c.TCPConn, cookie); err != nil {
			return 0, err
		}
	}
	c.Datapath = &msgClient{cookie: cookie}
	return cookie, nil
}

// PrepareConn implements datapath.ConnPreparer: the client's setup (client)
// is done as its connection is accepted, while its request is still on
// its way. A failure is met again at the arm (a client that half-closed
// at once, say), which then goes without the kernel.
func (k *MsgPath) PrepareConn(c *datapath.Conn) { _, _ = k.client(c) }

// credit is how many bytes the kernel may redirect to c for one response:
// half of what its send buffer can still take (the kernel counts a
// buffer's skb overhead against it, measured at about 2% for a stream).
// A redirect into a full socket loses the bytes while the replica is told
// they were sent (measured on 6.18), so the kernel must never fill it.
func credit(c *datapath.Conn) uint64 {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0
	}
	var free int64
	raw.Control(func(fd uintptr) {
		var mi [unix.SK_MEMINFO_VARS]uint32
		if err := getsockoptMeminfo(int(fd), &mi); err == nil {
			free = int64(mi[unix.SK_MEMINFO_SNDBUF]) - int64(mi[unix.SK_MEMINFO_WMEM_QUEUED])
		}
	})
	if free <= 0 {
		return 0
	}
	return uint64(free / 2)
}

// minCredit is the least credit worth an arm: below it the client is
// still reading an earlier response, and this one goes through the shim.
const minCredit = 64 << 10

// clientSendBuffer is the autotuning ceiling of TCP send buffers
// (net.ipv4.tcp_wmem's last value), 4 MiB if it cannot be read.
func clientSendBuffer() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_wmem")
	if err == nil {
		if f := strings.Fields(string(b)); len(f) == 3 {
			if n, err := strconv.Atoi(f[2]); err == nil && n > 0 {
				return n
			}
		}
	}
	return 4 << 20
}
