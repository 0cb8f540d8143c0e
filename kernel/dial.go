package kernel

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lmwarden/lmwarden/maps"
)

// OwnDialer opens the warden's own TCP connections (to replicas, and the
// metrics poller's) with their {source, destination} registered in
// lmw_own_conns before they connect. The dispatch program leaves
// registered connections alone, so none of them can be steered back into
// the shim, whatever the configuration: a frontend on a replica's own
// {address, port} (the layout that fails open to vLLM's listener) sends
// the warden's requests to vLLM, not to itself. Each connection's entry
// is removed when it closes.
type OwnDialer struct {
	st      *maps.State
	timeout time.Duration
	flags   uint64 // own_conn flags of every connection

	mu  sync.Mutex
	src map[netip.Addr]netip.Addr // destination -> the source the kernel picks for it
}

// NewOwnDialer returns a dialer over st; timeout bounds each connect.
// With pair, the replica's end of each connection is paired for the
// sk_msg datapath (OWN_PAIR): for upstream connections of MsgPath only.
func NewOwnDialer(st *maps.State, timeout time.Duration, pair bool) *OwnDialer {
	d := &OwnDialer{st: st, timeout: timeout, src: map[netip.Addr]netip.Addr{}}
	if pair {
		d.flags = maps.OwnPair
	}
	return d
}

// DialTCP opens a registered connection to addr (host:port); release
// forgets the registration (and the kernel's entries of the socket) and
// must run once the connection has closed (l7.Upstreams does that: it is
// an l7.DialFunc).
func (d *OwnDialer) DialTCP(ctx context.Context, addr string) (*net.TCPConn, func(), error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, nil, err
	}
	pn, err := net.DefaultResolver.LookupPort(ctx, "tcp", port)
	if err != nil {
		return nil, nil, err
	}
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, nil, err
	}
	var errs []error
	for _, ip := range ips {
		c, release, err := d.dialAddr(ctx, netip.AddrPortFrom(ip.Unmap(), uint16(pn)))
		if err == nil {
			return c, release, nil
		}
		errs = append(errs, err)
	}
	return nil, nil, errors.Join(errs...)
}

// DialContext is DialTCP for net/http: the connection forgets its
// registration when it is closed.
func (d *OwnDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	c, release, err := d.DialTCP(ctx, addr)
	if err != nil {
		return nil, err
	}
	return &ownConn{TCPConn: c, release: release}, nil
}

type ownConn struct {
	*net.TCPConn
	once    sync.Once
	release func()
}

func (c *ownConn) Close() error {
	err := c.TCPConn.Close()
	c.once.Do(c.release)
	return err
}

// dialAddr binds a socket to the source address the kernel would choose
// for dst, registers the pair, then connects.
func (d *OwnDialer) dialAddr(ctx context.Context, dst netip.AddrPort) (*net.TCPConn, func(), error) {
	src, err := d.source(dst.Addr())
	if err != nil {
		return nil, nil, err
	}
	var key maps.ConnKey
	var cookie uint64
	registered := false
	dialer := net.Dialer{Timeout: d.timeout, KeepAlive: 30 * time.Second}
	dialer.SetMultipathTCP(false) // a sockmap refuses MPTCP sockets
	dialer.Control = func(_, _ string, raw syscall.RawConn) error {
		var cerr error
		err := raw.Control(func(fd uintptr) {
			var sa unix.Sockaddr
			if src.Is4() {
				sa = &unix.SockaddrInet4{Addr: src.As4()}
			} else {
				sa = &unix.SockaddrInet6{Addr: src.As16()}
			}
			if cerr = unix.Bind(int(fd), sa); cerr != nil {
				cerr = fmt.Errorf("bind %s: %w", src, cerr)
				return
			}
			bound, err := unix.Getsockname(int(fd))
			if err != nil {
				cerr = err
				return
			}
			var port int
			switch b := bound.(type) {
			case *unix.SockaddrInet4:
				port = b.Port
			case *unix.SockaddrInet6:
				port = b.Port
			}
			if cookie, cerr = unix.GetsockoptUint64(int(fd), unix.SOL_SOCKET, unix.SO_COOKIE); cerr != nil {
				return
			}
			key = maps.OwnConnKey(netip.AddrPortFrom(src, uint16(port)), dst)
			if cerr = d.st.RegisterOwnConn(key, maps.OwnConn{Cookie: cookie, Flags: d.flags}); cerr == nil {
				registered = true
			}
		})
		if err != nil {
			return err
		}
		return cerr
	}
	nc, err := dialer.DialContext(ctx, "tcp", dst.String())
	if err != nil {
		if registered {
			d.st.ForgetOwnConn(key)
		}
		d.forgetSource(dst.Addr()) // the route may have changed
		return nil, nil, err
	}
	return nc.(*net.TCPConn), func() {
		d.st.ForgetOwnConn(key)
		d.st.ForgetSocket(cookie)
	}, nil
}

// source returns the address the kernel picks as source towards dst (a
// connected UDP socket sends nothing but resolves the route), cached.
func (d *OwnDialer) source(dst netip.Addr) (netip.Addr, error) {
	d.mu.Lock()
	src, ok := d.src[dst]
	d.mu.Unlock()
	if ok {
		return src, nil
	}
	u, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, 9)))
	if err != nil {
		return netip.Addr{}, fmt.Errorf("route to %s: %w", dst, err)
	}
	src = u.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap()
	u.Close()
	d.mu.Lock()
	d.src[dst] = src
	d.mu.Unlock()
	return src, nil
}

func (d *OwnDialer) forgetSource(dst netip.Addr) {
	d.mu.Lock()
	delete(d.src, dst)
	d.mu.Unlock()
}
