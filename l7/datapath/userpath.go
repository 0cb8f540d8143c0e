package datapath

import (
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lmwarden/lmwarden/l7/http1"
)

// UserPath is the userspace Datapath: bodies are copied with io.CopyN
// between *net.TCPConn, which the Go runtime carries out with splice(2), so
// body bytes go socket to pipe to socket without entering this process's
// memory. Chunk-size lines are parsed here; the chunk data in between is
// spliced, except small chunks that arrived with their size line, which are
// written out with it in one writev (an SSE event is one such chunk).
type UserPath struct {
	mu     sync.Mutex
	counts map[ReplicaKey]*byteCounters
}

// ReplicaKey names one replica of one model in counters.
type ReplicaKey struct {
	Model   string
	Replica int
}

// ByteCounts are body bytes the userspace datapath moved for one replica.
type ByteCounts struct {
	Up, Down uint64 // client to upstream, upstream to client
}

type byteCounters struct{ up, down atomic.Uint64 }

// NewUserPath returns the userspace datapath.
func NewUserPath() *UserPath { return &UserPath{counts: map[ReplicaKey]*byteCounters{}} }

// Name implements Datapath.
func (u *UserPath) Name() string { return "user" }

// Capabilities implements Datapath: the userspace copy takes no optional
// step.
func (u *UserPath) Capabilities() Capabilities { return Capabilities{Userspace: u} }

// Counts returns the bytes relayed in userspace per replica so far.
func (u *UserPath) Counts() map[ReplicaKey]ByteCounts {
	u.mu.Lock()
	defer u.mu.Unlock()
	out := make(map[ReplicaKey]ByteCounts, len(u.counts))
	for k, c := range u.counts {
		out[k] = ByteCounts{Up: c.up.Load(), Down: c.down.Load()}
	}
	return out
}

func (u *UserPath) counters(x *Exchange) *byteCounters {
	k := ReplicaKey{x.Model, x.Replica}
	u.mu.Lock()
	defer u.mu.Unlock()
	c := u.counts[k]
	if c == nil {
		c = &byteCounters{}
		u.counts[k] = c
	}
	return c
}

// RelayRequestBody implements Datapath.
func (u *UserPath) RelayRequestBody(x *Exchange) error {
	var (
		n   int64
		err error
	)
	switch x.Request.Framing {
	case http1.FramingLength:
		n, err = x.Client.copyTo(x.Upstream, x.Request.ContentLength, x.Idle)
	case http1.FramingChunked:
		n, err = copyChunked(x.Upstream, x.Client, x, false)
	}
	x.BodyBytesUp += n
	// Count what the shim sent along with the head too: all of the body
	// crossed this process.
	u.counters(x).up.Add(uint64(x.BodyBytesUp))
	return err
}

// RelayResponseBody implements Datapath.
func (u *UserPath) RelayResponseBody(x *Exchange) error {
	var (
		n   int64
		err error
	)
	switch x.Response.Framing {
	case http1.FramingLength:
		n, err = x.Upstream.copyTo(x.Client, x.Response.ContentLength, x.Idle)
	case http1.FramingChunked:
		x.respFrame, x.respFrameValid = http1.ChunkedBody{}, true
		n, err = relayChunked(x.Client, x.Upstream, x.Idle, false, true, &x.respFrame)
	case http1.FramingClose:
		n, err = x.Upstream.copyTo(x.Client, -1, x.Idle)
	}
	x.BodyBytesDown += n
	u.counters(x).down.Add(uint64(n))
	return err
}

// copyChunked relays a chunked body from src to dst unchanged (sizes,
// extensions and trailers pass through as sent), parsing only enough to
// know where it ends. With dechunk, only the chunk data is written (for an
// HTTP/1.0 client, whose response is then delimited by the close). It
// returns the bytes written to dst.
func copyChunked(dst, src *Conn, x *Exchange, dechunk bool) (int64, error) {
	return RelayChunked(dst, src, x.Idle, dechunk, true)
}

// spliceChunk is the chunk data left, with nothing of it read yet, from
// which RelayChunked moves it with splice(2) instead of reading it.
const spliceChunk = 16 << 10

// RelayChunked moves a chunked body from src to dst, framed by the one
// chunked parser (ChunkedBody): what each read brings goes out in one
// write (an SSE event is one read and one write). With splice, large chunk
// data is spliced; a socket in a sockmap cannot be (its bytes are not on
// the TCP queue), so the sk_skb datapath passes false. With dechunk, only
// the chunk data is written. Bytes past the body stay in src.Pending.
func RelayChunked(dst, src *Conn, idle time.Duration, dechunk, splice bool) (int64, error) {
	var p http1.ChunkedBody
	return relayChunked(dst, src, idle, dechunk, splice, &p)
}

// relayChunked is RelayChunked with the parser's state in p, where it
// stands when the relay ends (a cut stream's end is judged from it).
func relayChunked(dst, src *Conn, idle time.Duration, dechunk, splice bool, pp *http1.ChunkedBody) (int64, error) {
	p := pp
	var total int64
	var pieces [][]byte
	for !p.Done() {
		if len(src.Pending) == 0 {
			if splice && p.InData() && p.Remaining >= spliceChunk {
				m, err := src.copyTo(dst, int64(p.Remaining), idle)
				total += m
				p.Skip(uint64(m))
				if err != nil {
					return total, err
				}
				continue
			}
			_ = src.SetReadDeadline(src.readBy(idle))
			if err := src.Fill(); err != nil {
				if errors.Is(err, io.EOF) {
					err = io.ErrUnexpectedEOF
				}
				return total, err
			}
		}
		buf := src.Pending
		pieces = pieces[:0]
		i := 0
		for i < len(buf) && !p.Done() {
			n, data, err := p.Next(buf[i:])
			if err != nil {
				return total, err
			}
			if dechunk && data && n > 0 {
				pieces = append(pieces, buf[i:i+n])
			}
			i += n
		}
		if !dechunk {
			pieces = append(pieces, buf[:i])
		}
		src.Pending = buf[i:]
		n, err := dst.WriteAll(idle, pieces...)
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}
