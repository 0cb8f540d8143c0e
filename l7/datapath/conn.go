package datapath

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// Conn is one side of an exchange: a TCP connection and the bytes the shim
// has already read from it but not used yet. Those bytes are never hidden in
// a bufio.Reader: whoever moves the rest of the stream (the userspace copy,
// or a kernel datapath that takes over the socket) must send Pending first.
type Conn struct {
	*net.TCPConn
	Pending []byte
	// Peeked are bytes after a request head that a datapath saw without
	// consuming them (the sk_skb datapath peeks the first head, and what
	// came with it): the shim reads the body's start there, forwards
	// nothing from it, and forgets it with the exchange.
	Peeked  []byte
	buf     []byte // backing store that Pending usually points into
	release func() // runs once, after the socket closes (see DialFunc)
	closed  sync.Once
	// Datapath is the datapath's own record of this connection (a kernel
	// datapath keeps the socket's cookie and state there); the shim never
	// reads it.
	Datapath any
	// stampRead asks the next read that brings bytes to note its time in
	// readAt (the first body byte after a response head; see forward.go).
	stampRead bool
	readAt    time.Time
	// readLimit, if set, bounds every read of the connection however much
	// progress it makes (a request body's deadline).
	readLimit time.Time
	marks     []phaseMark // the exchange's steps (phases.go), when profiled
	// Answered is the status the shim answered the current request with
	// itself (0: none; the replica's answer, if any, went through): what
	// the access log writes for a request no replica answered.
	Answered   int
	AnsweredAt time.Time
}

// readBy is the read deadline of a wait of at most idle: now+idle, or the
// connection's readLimit if that is sooner.
func (c *Conn) readBy(idle time.Duration) time.Time {
	d := time.Now().Add(idle)
	if !c.readLimit.IsZero() && c.readLimit.Before(d) {
		return c.readLimit
	}
	return d
}

// NewConn wraps a TCP connection with an empty pending buffer.
func NewConn(c *net.TCPConn) *Conn { return &Conn{TCPConn: c} }

// NewDialedConn wraps a connection a dial function opened; release, if
// not nil, runs once after the connection has closed.
func NewDialedConn(c *net.TCPConn, release func()) *Conn {
	return &Conn{TCPConn: c, release: release}
}

// StampNextRead asks the next read that brings bytes to note its time
// (on), or stops asking; either way the time noted before is forgotten.
func (c *Conn) StampNextRead(on bool) { c.stampRead, c.readAt = on, time.Time{} }

// ReadStamp is the time the read StampNextRead asked for noted (zero:
// none), and whether that read is still to come.
func (c *Conn) ReadStamp() (at time.Time, waiting bool) { return c.readAt, c.stampRead }

// SetReadLimit bounds every read of the connection however much progress
// it makes (a request body's deadline); zero removes the bound.
func (c *Conn) SetReadLimit(t time.Time) { c.readLimit = t }

// Close closes the connection, then runs the release of the dialer that
// opened it, once.
func (c *Conn) Close() error {
	err := c.TCPConn.Close()
	c.closed.Do(func() {
		if c.release != nil {
			c.release()
		}
	})
	return err
}

// copySlice bounds one splice-backed copy, so the idle deadline is renewed
// at least once per this many bytes of progress.
const copySlice = 1 << 20

// errLineTooLong: a line (a chunk-size or trailer line) fills the
// connection's whole read buffer.
var ErrLineTooLong = errors.New("l7: chunk line too long")

// Fill reads at least one more byte from the connection into Pending.
func (c *Conn) Fill() error {
	if c.buf == nil {
		c.buf = make([]byte, 32<<10)
	}
	// Move what is pending to the start of buf if it does not sit there.
	if len(c.Pending) == 0 || &c.Pending[0] != &c.buf[0] {
		if len(c.Pending) > len(c.buf) {
			c.buf = make([]byte, len(c.Pending)+32<<10)
		}
		n := copy(c.buf, c.Pending)
		c.Pending = c.buf[:n]
	}
	if len(c.Pending) == len(c.buf) {
		return ErrLineTooLong
	}
	n, err := c.TCPConn.Read(c.buf[len(c.Pending):])
	c.Pending = c.buf[:len(c.Pending)+n]
	if n > 0 {
		if c.stampRead {
			c.stampRead, c.readAt = false, time.Now()
		}
		return nil
	}
	if err == nil {
		err = io.ErrNoProgress
	}
	return err
}

// copyTo moves exactly n bytes (or, with n < 0, everything until EOF) from
// c to dst: Pending first, then the connection with io.CopyN between the two
// *net.TCPConn, which the runtime turns into splice(2). idle bounds how long
// one slice of the copy may wait for progress on either side.
func (c *Conn) copyTo(dst *Conn, n int64, idle time.Duration) (int64, error) {
	var done int64
	if len(c.Pending) > 0 {
		k := int64(len(c.Pending))
		if n >= 0 {
			k = min(k, n)
		}
		_ = dst.SetWriteDeadline(time.Now().Add(idle))
		w, err := dst.TCPConn.Write(c.Pending[:k])
		c.Pending = c.Pending[w:]
		done += int64(w)
		if err != nil {
			return done, err
		}
	}
	for n < 0 || done < n {
		step := int64(copySlice)
		if n >= 0 {
			step = min(step, n-done)
		}
		_ = c.SetReadDeadline(c.readBy(idle))
		_ = dst.SetWriteDeadline(time.Now().Add(idle))
		m, err := io.CopyN(dst.TCPConn, c.TCPConn, step)
		done += m
		if err == io.EOF && n < 0 {
			return done, nil // close-delimited body ended
		}
		if err == io.EOF {
			return done, io.ErrUnexpectedEOF
		}
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

// WriteAll writes bufs to the connection in one writev where possible,
// within idle.
func (c *Conn) WriteAll(idle time.Duration, bufs ...[]byte) (int64, error) {
	_ = c.SetWriteDeadline(time.Now().Add(idle))
	nb := net.Buffers(bufs)
	return nb.WriteTo(c.TCPConn)
}
