package maps

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// drainTimeout bounds how long the shim waits for the kernel's queued bytes
// to land before it writes or closes (a peer that stopped reading).
const drainTimeout = 5 * time.Second

var (
	// ErrUpstreamClosed: the upstream closed before its response ended.
	ErrUpstreamClosed = errors.New("maps: upstream closed")
	// ErrClientGone: the client reset or closed during a response.
	ErrClientGone = errors.New("maps: client gone")
)

// Pair is one client connection handed to the kernel. The kernel carries
// each request body client->upstream and each whole response
// upstream->client; the shim reads through Pair.Read only what the kernel
// passes to it: the next request head on a keep-alive connection.
//
// The order of calls for every request is: StartRequest (arms the upstream
// before any request byte reaches it, so every response byte meets the
// verdict), WriteUpstream (the head and any body bytes the shim holds),
// CarryBody (arms the client for the rest of the body), WaitResponse.
type Pair struct {
	s       *State
	client  *net.TCPConn
	cCookie uint64
	cGen    uint32
	inMap   bool

	mu   sync.Mutex
	cond *sync.Cond
	// client stream, absolute offsets from its first byte
	offset    uint64 // next byte the shim has not got (read or peeked)
	consumed  uint64 // bytes read from the socket before it joined the map
	armAt     uint64
	bodyEnd   uint64
	resolving bool   // a carry is armed, its extent unknown until the next read
	queue     []byte // passed bytes read but not yet returned by Read
	rdErr     error

	up          *net.TCPConn
	uCookie     uint64
	uGen        uint32
	replica     uint32
	upWrote     uint64 // bytes the shim wrote to up
	toUpCarried uint64 // client bytes the kernel carried to up
	oldCarried  uint64 // upstream->client bytes carried by retired upstreams
	clientWrote uint64
	upDone      chan struct{}
	ends        chan ResponseEnd
	closed      bool
	gone        chan struct{} // closed on a client reset or Close
	goneOnce    sync.Once
}

// NewPair takes over client. The shim already has the first have bytes
// of its stream, of which it consumed (read from the socket) the first
// consumed; the rest it only peeked (PeekReader), and the verdict drops
// them. pending are bytes it has past the first request and its body,
// returned first by Read. Use have = peeked head, consumed = 0; a shim
// that consumed must first drain the socket to EAGAIN (DrainQueued) so that
// no segment is left half read.
func (s *State) NewPair(client *net.TCPConn, have, consumed uint64, pending []byte) (*Pair, error) {
	cookie, err := Cookie(client)
	if err != nil {
		return nil, err
	}
	p := &Pair{s: s, client: client, cCookie: cookie, offset: have, consumed: consumed,
		queue: append([]byte(nil), pending...), ends: make(chan ResponseEnd, 4),
		gone: make(chan struct{})}
	p.cond = sync.NewCond(&p.mu)
	return p, nil
}

// StartRequest arms up for the response to the next request. A new up
// replaces (and closes) the previous upstream.
func (p *Pair) StartRequest(up *net.TCPConn, replica uint32, noBody bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.replica = replica
	flags := uint32(0)
	if noBody {
		flags |= CtlNoBody
	}
	if up == p.up {
		// The previous response ended and the upstream sent nothing since:
		// the verdict has seen exactly the bytes it carried.
		st, err := p.s.SocketState(p.uCookie)
		if err != nil {
			return err
		}
		p.uGen++
		return p.s.Arm(p.uCookie, SockCtl{Peer: p.cCookie, ArmAt: st.Seen, Gen: p.uGen, Mode: ModeResponse, Replica: replica, Flags: flags})
	}
	cookie, err := Cookie(up)
	if err != nil {
		return err
	}
	p.retireUpLocked()
	p.up, p.uCookie, p.upWrote, p.toUpCarried = up, cookie, 0, 0
	p.upDone = make(chan struct{})
	if err := p.s.watchEnds(cookie, p.ends); err != nil {
		return err
	}
	p.uGen++
	if err := p.s.Arm(cookie, SockCtl{Peer: p.cCookie, Gen: p.uGen, Mode: ModeResponse, Replica: replica, Flags: flags}); err != nil {
		return err
	}
	if err := p.s.AddSocket(up, cookie, 0); err != nil {
		return err
	}
	go p.watchUp(up, p.upDone)
	return nil
}

func (p *Pair) retireUpLocked() {
	if p.up == nil {
		return
	}
	if st, err := p.s.SocketState(p.uCookie); err == nil {
		p.oldCarried += st.Carried
	}
	p.s.unwatchEnds(p.uCookie)
	p.s.ForgetSocket(p.uCookie)
	p.up.Close()
	p.up = nil
}

// watchUp notices the upstream's FIN or RST: a FIN is not carried across
// a redirect, so the shim must see it and act for the client.
func (p *Pair) watchUp(up *net.TCPConn, done chan struct{}) {
	buf := make([]byte, 4096)
	for {
		n, err := up.Read(buf)
		if n > 0 {
			// Only possible if bytes arrived unarmed; keep them in order.
			p.mu.Lock()
			p.drainClientLocked()
			if w, _ := p.client.Write(buf[:n]); w > 0 {
				p.clientWrote += uint64(w)
			}
			p.mu.Unlock()
		}
		if err != nil {
			close(done)
			return
		}
	}
}

// WriteUpstream writes bytes the shim holds (the head, held body bytes)
// to the upstream, after any bytes the kernel already carried there.
func (p *Pair) WriteUpstream(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.writeUpLocked(b)
}

func (p *Pair) writeUpLocked(b []byte) (int, error) {
	if p.toUpCarried > 0 {
		if err := waitWritten(p.up, p.upWrote+p.toUpCarried, drainTimeout); err != nil {
			return 0, err
		}
	}
	n, err := p.up.Write(b)
	p.upWrote += uint64(n)
	return n, err
}

// WriteClient writes bytes of the shim's own (an error response) to the
// client, after every byte the kernel carried there.
func (p *Pair) WriteClient(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.drainClientLocked()
	n, err := p.client.Write(b)
	p.clientWrote += uint64(n)
	return n, err
}

func (p *Pair) carriedToClientLocked() uint64 {
	c := p.oldCarried
	if p.up != nil {
		if st, err := p.s.SocketState(p.uCookie); err == nil {
			c += st.Carried
		}
	}
	return c
}

func (p *Pair) drainClientLocked() error {
	return waitWritten(p.client, p.clientWrote+p.carriedToClientLocked(), drainTimeout)
}

// CarryBody lets the kernel carry the next remaining body bytes of the
// current request to the upstream. Bytes the shim already read past the
// head are taken from its queue and written first.
func (p *Pair) CarryBody(remaining uint64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if k := min(uint64(len(p.queue)), remaining); k > 0 {
		if _, err := p.writeUpLocked(p.queue[:k]); err != nil {
			return err
		}
		p.queue = p.queue[k:]
		remaining -= k
	}
	p.cGen++
	p.armAt, p.bodyEnd = p.offset, p.offset+remaining
	p.resolving = remaining > 0
	ctl := SockCtl{Peer: p.uCookie, ArmAt: p.armAt, BodyEnd: p.bodyEnd, Gen: p.cGen, Mode: ModeRequest, Replica: p.replica}
	if err := p.s.Arm(p.cCookie, ctl); err != nil {
		return err
	}
	if !p.inMap {
		if err := p.s.AddSocket(p.client, p.cCookie, p.consumed); err != nil {
			return err
		}
		p.inMap = true
		go p.readClient()
	}
	return nil
}

// readClient reads what the kernel passes from the client. A body byte
// among them (the arm found passed bytes the shim had not read, or a
// segment straddled the body's end) is written to the upstream here, after
// the bytes the kernel carried; the rest is the next head, queued for Read.
func (p *Pair) readClient() {
	buf := make([]byte, 64<<10)
	for {
		n, err := p.client.Read(buf)
		p.mu.Lock()
		if n > 0 {
			data := buf[:n]
			if p.resolving {
				carried := uint64(0)
				if st, serr := p.s.SocketState(p.cCookie); serr == nil && st.Gen == p.cGen {
					carried = st.Redirected
				}
				p.offset = p.armAt + carried
				p.toUpCarried += carried
				p.resolving = false
			}
			if p.offset < p.bodyEnd {
				k := min(uint64(len(data)), p.bodyEnd-p.offset)
				if p.up != nil {
					p.writeUpLocked(data[:k])
				}
				data = data[k:]
			}
			p.offset += uint64(n)
			p.queue = append(p.queue, data...)
		}
		if err != nil {
			p.rdErr = err
			// A client FIN aborts the response, as in the userspace shim
			// (l7 watchClient); measured on 6.18, bytes redirected to a
			// socket after its peer's FIN are not delivered either.
			p.markGone()
		}
		p.cond.Broadcast()
		p.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// Read returns client bytes the kernel passed to the shim: the next
// request head (and a body the kernel does not carry).
func (p *Pair) Read(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.queue) == 0 && p.rdErr == nil && !p.closed {
		if !p.inMap {
			return 0, errors.New("maps: Pair.Read before CarryBody")
		}
		p.cond.Wait()
	}
	if len(p.queue) > 0 {
		n := copy(b, p.queue)
		p.queue = p.queue[n:]
		return n, nil
	}
	if p.closed {
		return 0, net.ErrClosed
	}
	return 0, p.rdErr
}

// WaitResponse returns when the kernel found the end of the current
// response (Content-Length or chunked framing), or the upstream closed
// (a response framed by close ends there; otherwise ErrUpstreamClosed),
// or the client closed or reset the connection (ErrClientGone).
func (p *Pair) WaitResponse(ctx context.Context) (ResponseEnd, error) {
	p.mu.Lock()
	gen, upDone := p.uGen, p.upDone
	p.mu.Unlock()
	for {
		select {
		case ev := <-p.ends:
			if ev.Gen == gen {
				return ev, nil
			}
		case <-upDone:
			st, _ := p.s.SocketState(p.uCookie)
			if st.Gen == gen && st.DoneGen == gen {
				return ResponseEnd{Cookie: p.uCookie, Gen: gen, Status: st.Status, How: 1}, nil
			}
			if st.Gen == gen && st.Phase == PhaseUntilClose {
				return ResponseEnd{Cookie: p.uCookie, Gen: gen, Status: st.Status, Bytes: st.Redirected}, nil
			}
			return ResponseEnd{}, ErrUpstreamClosed
		case <-ctx.Done():
			return ResponseEnd{}, ctx.Err()
		case <-p.clientGone():
			return ResponseEnd{}, ErrClientGone
		}
	}
}

func (p *Pair) clientGone() <-chan struct{} { return p.gone }

func (p *Pair) markGone() { p.goneOnce.Do(func() { close(p.gone) }) }

// Close tears the pair down: it lets the kernel's queued bytes land
// (bounded), removes both sockets from the maps and closes them.
func (p *Pair) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	if p.rdErr == nil || errors.Is(p.rdErr, io.EOF) {
		p.drainClientLocked()
	}
	p.closed = true
	p.markGone()
	p.retireUpLocked()
	p.s.ForgetSocket(p.cCookie)
	err := p.client.Close()
	p.cond.Broadcast()
	p.mu.Unlock()
	return err
}

// Cookies returns the client's and the current upstream's socket cookies.
func (p *Pair) Cookies() (client, upstream uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cCookie, p.uCookie
}
