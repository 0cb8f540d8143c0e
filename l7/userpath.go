package l7

import (
	"bytes"
	"sync"
	"sync/atomic"
	"time"
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
	case FramingLength:
		n, err = x.Client.copyTo(x.Upstream, x.Request.ContentLength, x.Idle)
	case FramingChunked:
		n, err = copyChunked(x.Upstream, x.Client, x, false)
	}
	x.BodyBytesUp += n
	// Count what the shim sent along with the head too: all of the body
	// crossed this process.
	u.counters(x).up.Add(uint64(x.BodyBytesUp))
	return err
}

// relayDechunked relays a chunked response body as plain data, for an
// HTTP/1.0 client that cannot parse chunks; the shim does this itself,
// whatever the datapath, and closes the client connection after it.
func relayDechunked(x *Exchange) error {
	n, err := copyChunked(x.Client, x.Upstream, x, true)
	x.BodyBytesDown += n
	return err
}

// RelayResponseBody implements Datapath.
func (u *UserPath) RelayResponseBody(x *Exchange) error {
	var (
		n   int64
		err error
	)
	switch x.Response.Framing {
	case FramingLength:
		n, err = x.Upstream.copyTo(x.Client, x.Response.ContentLength, x.Idle)
	case FramingChunked:
		n, err = copyChunked(x.Client, x.Upstream, x, false)
	case FramingClose:
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
	var total int64
	write := func(bufs ...[]byte) error {
		if dechunk { // keep only the data: bufs[1] when there is one
			if len(bufs) < 2 {
				return nil
			}
			bufs = bufs[1:2]
		}
		n, err := dst.writeAll(x.Idle, bufs...)
		total += n
		return err
	}
	for {
		_ = src.SetReadDeadline(time.Now().Add(x.Idle))
		line, err := src.readLine()
		if err != nil {
			return total, err
		}
		size, err := parseChunkSize(line)
		if err != nil {
			return total, err
		}
		if size == 0 {
			// Last chunk: trailers up to the empty line go with it.
			out := append([]byte(nil), line...)
			for {
				t, err := src.readLine()
				if err != nil {
					return total, err
				}
				if err := checkTrailerLine(t); err != nil {
					return total, err
				}
				out = append(out, t...)
				if len(out) > MaxHeadBytes {
					return total, errBadChunk
				}
				if bytes.Equal(t, []byte("\r\n")) {
					break
				}
			}
			return total, write(out)
		}
		if avail := int64(len(src.Pending)); avail >= size+2 {
			// The whole chunk arrived with its size line: one writev.
			data := src.Pending[:size+2]
			if data[size] != '\r' || data[size+1] != '\n' {
				return total, errBadChunk
			}
			src.Pending = src.Pending[size+2:]
			if err := write(line, data[:size], data[size:]); err != nil {
				return total, err
			}
			continue
		}
		if err := write(line); err != nil {
			return total, err
		}
		m, err := src.copyTo(dst, size, x.Idle)
		total += m
		if err != nil {
			return total, err
		}
		crlf, err := src.readLine()
		if err != nil {
			return total, err
		}
		if !bytes.Equal(crlf, []byte("\r\n")) {
			return total, errBadChunk
		}
		if err := write(crlf); err != nil {
			return total, err
		}
	}
}

// parseChunkSize reads the hex size of a chunk line ("1a;ext=v\r\n").
// Strict: CRLF ending, at most 15 hex digits, nothing but an extension
// after the size, so the shim and the upstream agree on every boundary.
func parseChunkSize(line []byte) (int64, error) {
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return 0, errBadChunk
	}
	line = line[:len(line)-2]
	for _, c := range line {
		if (c < ' ' && c != '\t') || c == 0x7f {
			return 0, errBadChunk // a bare CR ends the line for some parsers
		}
	}
	if i := bytes.IndexByte(line, ';'); i >= 0 {
		line = bytes.TrimRight(line[:i], " \t") // BWS only before an extension
	}
	if len(line) == 0 || len(line) > 15 {
		return 0, errBadChunk
	}
	var n int64
	for _, c := range line {
		switch {
		case c >= '0' && c <= '9':
			n = n<<4 | int64(c-'0')
		case c >= 'a' && c <= 'f':
			n = n<<4 | int64(c-'a'+10)
		case c >= 'A' && c <= 'F':
			n = n<<4 | int64(c-'A'+10)
		default:
			return 0, errBadChunk
		}
	}
	return n, nil
}

// checkTrailerLine accepts the blank line that ends a chunked body or a
// well-formed trailer field line, CRLF-terminated: a trailer that two
// parsers read differently (bare LF, obs-fold, control bytes) could hide a
// request boundary, so it is an error like a bad chunk size.
func checkTrailerLine(t []byte) error {
	if len(t) < 2 || t[len(t)-2] != '\r' {
		return errBadChunk
	}
	if len(t) == 2 {
		return nil
	}
	if _, err := parseHeaderLine(string(t[:len(t)-2])); err != nil {
		return errBadChunk
	}
	return nil
}
