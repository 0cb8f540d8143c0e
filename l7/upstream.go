package l7

import (
	"context"
	"errors"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/lmwarden/lmwarden/l7/datapath"
)

// Upstreams dials replicas and keeps idle keep-alive connections to them,
// a bounded list per address. A pooled connection is checked before reuse,
// so one that the replica closed while idle (uvicorn drops idle
// connections after 5 s) is dropped here instead of failing a request.
type Upstreams struct {
	dialer      net.Dialer
	dial        DialFunc // nil: dialer
	maxIdle     int
	idleTimeout time.Duration

	mu      sync.Mutex
	idle    map[string][]pooledConn
	closed  bool
	janitor sync.Once
	stop    chan struct{}
}

type pooledConn struct {
	c     *datapath.Conn
	since time.Time
}

// NewUpstreams returns a pool that keeps at most maxIdle idle connections
// per address, each for at most idleTimeout, and dials with connectTimeout.
// Dialed connections are plain TCP (no MPTCP), so a kernel datapath can put
// them in a sockmap.
func NewUpstreams(connectTimeout, idleTimeout time.Duration, maxIdle int) *Upstreams {
	u := &Upstreams{
		dialer:      net.Dialer{Timeout: connectTimeout, KeepAlive: 30 * time.Second},
		maxIdle:     maxIdle,
		idleTimeout: idleTimeout,
		idle:        map[string][]pooledConn{},
		stop:        make(chan struct{}),
	}
	u.dialer.SetMultipathTCP(false)
	return u
}

// DialFunc opens a plain-TCP (not MPTCP) connection to a replica at addr.
// A kernel datapath registers each connection it opens before it connects
// (so its own dispatch program never steers it back into the shim);
// release, if not nil, runs once after the connection has closed.
type DialFunc func(ctx context.Context, addr string) (c *net.TCPConn, release func(), err error)

// SetDial makes the pool open its connections with dial instead of a plain
// dialer. Call it before the first Get.
func (u *Upstreams) SetDial(dial DialFunc) { u.dial = dial }

// Get returns a live idle connection to addr if the pool has one
// (reused = true), or dials a new one.
func (u *Upstreams) Get(ctx context.Context, addr string) (c *datapath.Conn, reused bool, err error) {
	if c := u.takeIdle(addr); c != nil {
		return c, true, nil
	}
	c, err = u.Dial(ctx, addr)
	return c, false, err
}

// Dial opens a new connection to addr.
func (u *Upstreams) Dial(ctx context.Context, addr string) (*datapath.Conn, error) {
	if u.dial != nil {
		ctx, cancel := context.WithTimeout(ctx, u.dialer.Timeout)
		defer cancel()
		tc, release, err := u.dial(ctx, addr)
		if err != nil {
			return nil, err
		}
		return datapath.NewDialedConn(tc, release), nil
	}
	nc, err := u.dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		nc.Close()
		return nil, errors.New("l7: upstream is not TCP")
	}
	return datapath.NewConn(tc), nil
}

func (u *Upstreams) takeIdle(addr string) *datapath.Conn {
	now := time.Now()
	for {
		u.mu.Lock()
		list := u.idle[addr]
		if len(list) == 0 {
			u.mu.Unlock()
			return nil
		}
		// Newest first: it is the least likely to have been closed.
		p := list[len(list)-1]
		u.idle[addr] = list[:len(list)-1]
		u.mu.Unlock()
		if now.Sub(p.since) < u.idleTimeout && len(p.c.Pending) == 0 && alive(p.c) {
			return p.c
		}
		p.c.Close()
	}
}

// Put returns a connection whose last response was read completely. It is
// closed instead if the pool for addr is full or the pool is closed.
func (u *Upstreams) Put(addr string, c *datapath.Conn) {
	_ = c.SetDeadline(time.Time{}) // a pooled connection keeps no deadline
	u.mu.Lock()
	if u.closed || len(u.idle[addr]) >= u.maxIdle || len(c.Pending) > 0 {
		u.mu.Unlock()
		c.Close()
		return
	}
	now := time.Now()
	expired := u.expireLocked(addr, now)
	u.idle[addr] = append(u.idle[addr], pooledConn{c: c, since: now})
	u.mu.Unlock()
	for _, p := range expired {
		p.c.Close()
	}
	u.janitor.Do(func() { go u.sweep() })
}

// expireLocked takes the connections to addr idle past their age out of
// the pool (oldest first) and returns them to be closed: the replica has
// closed them by now, and they would linger in CLOSE_WAIT. Call with mu.
func (u *Upstreams) expireLocked(addr string, now time.Time) []pooledConn {
	list := u.idle[addr]
	n := 0
	for n < len(list) && now.Sub(list[n].since) >= u.idleTimeout {
		n++
	}
	if n == 0 {
		return nil
	}
	expired := append([]pooledConn(nil), list[:n]...)
	if n == len(list) {
		delete(u.idle, addr)
	} else {
		u.idle[addr] = list[n:]
	}
	return expired
}

// sweep closes idle connections past their age on a timer, not only when
// the pool is next used: after a burst, a pool nobody takes from again
// would otherwise keep its sockets (and the replica's) open.
func (u *Upstreams) sweep() {
	t := time.NewTicker(max(u.idleTimeout/4, 50*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-u.stop:
			return
		case now := <-t.C:
			var expired []pooledConn
			u.mu.Lock()
			for addr := range u.idle {
				expired = append(expired, u.expireLocked(addr, now)...)
			}
			u.mu.Unlock()
			for _, p := range expired {
				p.c.Close()
			}
		}
	}
}

// Idle returns the number of idle pooled connections to addr.
func (u *Upstreams) Idle(addr string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.idle[addr])
}

// Close closes every idle connection; later Puts close theirs.
func (u *Upstreams) Close() error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if !u.closed {
		close(u.stop)
	}
	u.closed = true
	for addr, list := range u.idle {
		for _, p := range list {
			p.c.Close()
		}
		delete(u.idle, addr)
	}
	return nil
}

// alive reports whether an idle connection is still open and silent: a
// non-blocking MSG_PEEK finds EOF (peer closed), stray bytes (protocol
// error) or nothing (alive), without consuming anything.
func alive(c *datapath.Conn) bool {
	rc, err := c.SyscallConn()
	if err != nil {
		return false
	}
	ok := false
	var b [1]byte
	err = rc.Read(func(fd uintptr) bool {
		n, _, rerr := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		ok = n < 0 && (rerr == syscall.EAGAIN || rerr == syscall.EWOULDBLOCK)
		return true // never wait for readiness
	})
	return err == nil && ok
}
