package picker

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"
)

// SPOEAgent answers HAProxy's stream processing offload engine (SPOE) with
// the same picks the ext_proc server makes, so that HAProxy, which has no
// ext_proc, places conversations with LM Warden's placement too
// (deploy/haproxy/ has the configuration, docs/multihost.md the details).
//
// HAProxy sends, per request, the message "lmwarden-pick" whose arguments
// are the request's session headers (each argument named by its header)
// and "content-length"; the agent answers with transaction variables:
//
//	endpoint  the picked host's ip:port (HAProxy routes to the backend named host:<endpoint>)
//	ticket    an id to hand back in "lmwarden-done"
//	status    503 (no host ready) or 429 (shed) instead of an endpoint
//
// HAProxy sends "lmwarden-done" with the ticket (and the address it
// connected to: "served" as ip:port, or "served_ip" and "served_port")
// when the response head arrives; the request
// counts in flight on its host until then, or until TicketTTL for a
// request whose response never came.
type SPOEAgent struct {
	reg *Registry
	log *slog.Logger
	// TicketTTL bounds how long a pick whose "lmwarden-done" never comes
	// stays in flight.
	TicketTTL time.Duration

	mu      sync.Mutex
	tickets map[uint64]ticket
	next    uint64
	conns   map[net.Conn]struct{}
	closed  bool
	wg      sync.WaitGroup
}

type ticket struct {
	pick *Pick
	at   time.Time
}

// SPOE message names and the argument names the agent reads.
const (
	SPOEPickMessage = "lmwarden-pick"
	SPOEDoneMessage = "lmwarden-done"
)

// DefaultTicketTTL is past any response head a replica sends (the warden's
// response timeout is 300 s).
const DefaultTicketTTL = 10 * time.Minute

// NewSPOEAgent answers SPOE messages with reg's picks.
func NewSPOEAgent(reg *Registry, log *slog.Logger) *SPOEAgent {
	if log == nil {
		log = slog.Default()
	}
	return &SPOEAgent{reg: reg, log: log, TicketTTL: DefaultTicketTTL, tickets: map[uint64]ticket{}, conns: map[net.Conn]struct{}{}}
}

// Serve accepts HAProxy's connections on ln until ctx ends or Close.
func (a *SPOEAgent) Serve(ctx context.Context, ln net.Listener) {
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	a.wg.Go(func() { a.sweep(ctx) })
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		a.mu.Lock()
		if a.closed {
			a.mu.Unlock()
			c.Close()
			return
		}
		a.conns[c] = struct{}{}
		a.mu.Unlock()
		a.wg.Go(func() {
			defer func() {
				a.mu.Lock()
				delete(a.conns, c)
				a.mu.Unlock()
				c.Close()
			}()
			if err := a.serveConn(c); err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				a.log.Debug("spoe connection", "peer", c.RemoteAddr().String(), "err", err)
			}
		})
	}
}

// Close ends every connection and every ticket.
func (a *SPOEAgent) Close() {
	a.mu.Lock()
	a.closed = true
	for c := range a.conns {
		c.Close()
	}
	ts := a.tickets
	a.tickets = map[uint64]ticket{}
	a.mu.Unlock()
	for _, t := range ts {
		a.reg.Done(t.pick)
	}
	a.wg.Wait()
}

// sweep ends the picks whose done message never came.
func (a *SPOEAgent) sweep(ctx context.Context) {
	t := time.NewTicker(a.TicketTTL / 10)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			var old []*Pick
			a.mu.Lock()
			for id, tk := range a.tickets {
				if now.Sub(tk.at) > a.TicketTTL {
					old = append(old, tk.pick)
					delete(a.tickets, id)
				}
			}
			a.mu.Unlock()
			for _, p := range old {
				a.reg.Done(p)
			}
		}
	}
}

// SPOP frame types, flags, data types, actions and scopes (HAProxy's
// doc/SPOE.txt, SPOP 2.0).
const (
	spoeHaproxyHello      = 1
	spoeHaproxyDisconnect = 2
	spoeNotify            = 3
	spoeAgentHello        = 101
	spoeAgentDisconnect   = 102
	spoeAck               = 103

	spoeFlagFin   = 1
	spoeFlagAbort = 2

	spoeNull   = 0
	spoeBool   = 1
	spoeInt32  = 2
	spoeUint32 = 3
	spoeInt64  = 4
	spoeUint64 = 5
	spoeIPv4   = 6
	spoeIPv6   = 7
	spoeString = 8
	spoeBinary = 9

	spoeSetVar   = 1
	spoeScopeTxn = 2

	// spoeMaxFrame is the largest frame the agent takes or sends (HAProxy
	// offers its buffer size less 4; the agent answers the smaller).
	spoeMaxFrame = 16380
)

var errSPOE = errors.New("spoe")

// spoeFrame is one decoded frame.
type spoeFrame struct {
	typ      byte
	flags    uint32
	stream   uint64
	frame    uint64
	payload  []byte
	kvs      map[string]spoeValue // HELLO and DISCONNECT payloads
	messages []spoeMessage        // NOTIFY payloads
}

type spoeMessage struct {
	name string
	args []spoeArg
}

type spoeArg struct {
	name  string
	value spoeValue
}

// spoeValue is one typed datum; only what the agent reads is kept.
type spoeValue struct {
	typ byte
	b   bool
	n   uint64
	s   string // strings, binaries, and addresses in text form
}

func (v spoeValue) text() string {
	switch v.typ {
	case spoeString, spoeBinary, spoeIPv4, spoeIPv6:
		return v.s
	case spoeInt32, spoeInt64:
		return strconv.FormatInt(int64(v.n), 10)
	case spoeUint32, spoeUint64:
		return strconv.FormatUint(v.n, 10)
	}
	return ""
}

// serveConn runs one HAProxy connection: the HELLO handshake, then NOTIFY
// frames answered in order with ACK frames.
func (a *SPOEAgent) serveConn(c net.Conn) error {
	br := bufio.NewReaderSize(c, 4096)
	bw := bufio.NewWriterSize(c, 4096)
	hello, err := readSPOEFrame(br, spoeMaxFrame)
	if err != nil {
		return err
	}
	if hello.typ != spoeHaproxyHello {
		return a.disconnect(bw, 4, "the first frame must be HAPROXY-HELLO")
	}
	if err := hello.decodeKVs(); err != nil {
		return a.disconnect(bw, 4, err.Error())
	}
	if !spoeVersionOK(hello.kvs["supported-versions"].s) {
		return a.disconnect(bw, 8, "SPOP 2.0 is the only version this agent speaks")
	}
	max := uint64(spoeMaxFrame)
	if v, ok := hello.kvs["max-frame-size"]; ok && v.n > 0 && v.n < max {
		max = v.n
	}
	var out []byte
	out = appendKV(out, "version", spoeString, "2.0", 0)
	out = appendKV(out, "max-frame-size", spoeUint32, "", max)
	out = appendKV(out, "capabilities", spoeString, "pipelining", 0)
	if err := writeSPOEFrame(bw, spoeAgentHello, 0, 0, out); err != nil {
		return err
	}
	if hello.kvs["healthcheck"].b {
		return nil // a health check: HELLO answered, the connection ends
	}
	for {
		f, err := readSPOEFrame(br, int(max))
		if err != nil {
			return err
		}
		switch f.typ {
		case spoeHaproxyDisconnect:
			return a.disconnect(bw, 0, "bye")
		case spoeNotify:
			if f.flags&spoeFlagAbort != 0 {
				continue
			}
			if err := f.decodeMessages(); err != nil {
				return a.disconnect(bw, 4, err.Error())
			}
			a.reg.stats.spoeFrames.Add(1)
			if err := writeSPOEFrame(bw, spoeAck, f.stream, f.frame, a.actions(f.messages)); err != nil {
				return err
			}
		}
	}
}

func spoeVersionOK(list string) bool {
	for _, v := range strings.Split(list, ",") {
		if major, _, _ := strings.Cut(strings.TrimSpace(v), "."); major == "2" {
			return true
		}
	}
	return false
}

func (a *SPOEAgent) disconnect(bw *bufio.Writer, code uint64, msg string) error {
	var out []byte
	out = appendKV(out, "status-code", spoeUint32, "", code)
	out = appendKV(out, "message", spoeString, msg, 0)
	if err := writeSPOEFrame(bw, spoeAgentDisconnect, 0, 0, out); err != nil {
		return err
	}
	if code != 0 {
		return fmt.Errorf("%w: %s", errSPOE, msg)
	}
	return io.EOF
}

// actions answers the messages of one NOTIFY frame.
func (a *SPOEAgent) actions(msgs []spoeMessage) []byte {
	var out []byte
	for _, m := range msgs {
		switch m.name {
		case SPOEPickMessage:
			out = a.pick(out, m.args)
		case SPOEDoneMessage:
			a.done(m.args)
		}
	}
	return out
}

// pick places one request and writes the set-var actions.
func (a *SPOEAgent) pick(out []byte, args []spoeArg) []byte {
	heads := a.reg.cfg.SessionHeaders
	rank := len(heads)
	var q Request
	for _, arg := range args {
		if strings.EqualFold(arg.name, "content-length") {
			if n, err := strconv.ParseInt(strings.TrimSpace(arg.value.text()), 10, 64); err == nil && n > 0 {
				q.PromptBytes = n
			}
			continue
		}
		for j := 0; j < rank; j++ {
			if strings.EqualFold(arg.name, heads[j]) {
				if v := strings.TrimSpace(arg.value.text()); v != "" {
					q.SessionID, rank = v, j
				}
				break
			}
		}
	}
	q.Now = time.Now()
	p, err := a.reg.Pick(q)
	switch {
	case errors.Is(err, ErrShed):
		return appendSetVar(out, "status", spoeInt32, "", 429)
	case err != nil:
		return appendSetVar(out, "status", spoeInt32, "", 503)
	}
	a.mu.Lock()
	a.next++
	id := a.next
	a.tickets[id] = ticket{pick: p, at: q.Now}
	a.mu.Unlock()
	out = appendSetVar(out, "endpoint", spoeString, p.Endpoints[0], 0)
	return appendSetVar(out, "ticket", spoeUint64, "", id)
}

// done ends the request of a ticket, moving it first if another host
// served it.
func (a *SPOEAgent) done(args []spoeArg) {
	var id uint64
	served, servedIP, servedPort := "", "", ""
	for _, arg := range args {
		switch arg.name {
		case "ticket":
			if arg.value.typ == spoeString || arg.value.typ == spoeBinary {
				id, _ = strconv.ParseUint(arg.value.s, 10, 64)
			} else {
				id = arg.value.n
			}
		case "served":
			served = arg.value.text()
		case "served_ip":
			servedIP = arg.value.text()
		case "served_port":
			servedPort = arg.value.text()
		}
	}
	if served == "" && servedIP != "" && servedPort != "" {
		served = net.JoinHostPort(servedIP, servedPort)
	}
	a.mu.Lock()
	t, ok := a.tickets[id]
	delete(a.tickets, id)
	a.mu.Unlock()
	if !ok {
		return
	}
	a.reg.Served(t.pick, served)
	a.reg.Done(t.pick)
}

// readSPOEFrame reads one length-prefixed frame (its metadata decoded, its
// payload kept raw).
func readSPOEFrame(r *bufio.Reader, max int) (*spoeFrame, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > uint32(max) || n < 7 {
		return nil, fmt.Errorf("%w: a frame of %d bytes (at most %d)", errSPOE, n, max)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, err
	}
	f := &spoeFrame{typ: buf[0], flags: binary.BigEndian.Uint32(buf[1:5])}
	p := buf[5:]
	var err error
	if f.stream, p, err = readVarint(p); err != nil {
		return nil, err
	}
	if f.frame, p, err = readVarint(p); err != nil {
		return nil, err
	}
	f.payload = p
	return f, nil
}

// writeSPOEFrame writes one unfragmented frame (FIN set) and flushes.
func writeSPOEFrame(w *bufio.Writer, typ byte, stream, frame uint64, payload []byte) error {
	meta := []byte{typ, 0, 0, 0, spoeFlagFin}
	meta = appendVarint(meta, stream)
	meta = appendVarint(meta, frame)
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], uint32(len(meta)+len(payload)))
	w.Write(hdr[:])
	w.Write(meta)
	w.Write(payload)
	return w.Flush()
}

func (f *spoeFrame) decodeKVs() error {
	f.kvs = map[string]spoeValue{}
	p := f.payload
	for len(p) > 0 {
		var k string
		var v spoeValue
		var err error
		if k, p, err = readString(p); err != nil {
			return err
		}
		if v, p, err = readTyped(p); err != nil {
			return err
		}
		f.kvs[k] = v
	}
	return nil
}

func (f *spoeFrame) decodeMessages() error {
	p := f.payload
	for len(p) > 0 {
		var m spoeMessage
		var err error
		if m.name, p, err = readString(p); err != nil {
			return err
		}
		if len(p) < 1 {
			return fmt.Errorf("%w: message %q without its argument count", errSPOE, m.name)
		}
		nargs := int(p[0])
		p = p[1:]
		for i := 0; i < nargs; i++ {
			var arg spoeArg
			if arg.name, p, err = readString(p); err != nil {
				return err
			}
			if arg.value, p, err = readTyped(p); err != nil {
				return err
			}
			m.args = append(m.args, arg)
		}
		f.messages = append(f.messages, m)
	}
	return nil
}

// readVarint decodes SPOP's variable-length integer: a byte under 240 is
// the value; otherwise the low 4 bits of the first byte and 7 bits of each
// next one, while their top bit is set, added on above 240.
func readVarint(p []byte) (uint64, []byte, error) {
	if len(p) == 0 {
		return 0, nil, fmt.Errorf("%w: truncated integer", errSPOE)
	}
	v := uint64(p[0])
	p = p[1:]
	if v < 240 {
		return v, p, nil
	}
	shift := uint(4)
	for {
		if len(p) == 0 || shift > 63 {
			return 0, nil, fmt.Errorf("%w: truncated integer", errSPOE)
		}
		b := p[0]
		p = p[1:]
		v += uint64(b) << shift
		shift += 7
		if b < 128 {
			return v, p, nil
		}
	}
}

// appendVarint is readVarint's inverse.
func appendVarint(b []byte, v uint64) []byte {
	if v < 240 {
		return append(b, byte(v))
	}
	b = append(b, byte(v)|240)
	v = (v - 240) >> 4
	for v >= 128 {
		b = append(b, byte(v)|128)
		v = (v - 128) >> 7
	}
	return append(b, byte(v))
}

func readString(p []byte) (string, []byte, error) {
	n, p, err := readVarint(p)
	if err != nil {
		return "", nil, err
	}
	if uint64(len(p)) < n {
		return "", nil, fmt.Errorf("%w: truncated string", errSPOE)
	}
	return string(p[:n]), p[n:], nil
}

func readTyped(p []byte) (spoeValue, []byte, error) {
	if len(p) == 0 {
		return spoeValue{}, nil, fmt.Errorf("%w: truncated value", errSPOE)
	}
	v := spoeValue{typ: p[0] & 0x0f}
	flags := p[0] >> 4
	p = p[1:]
	var err error
	switch v.typ {
	case spoeNull:
	case spoeBool:
		v.b = flags&1 != 0
	case spoeInt32, spoeUint32, spoeInt64, spoeUint64:
		v.n, p, err = readVarint(p)
	case spoeIPv4, spoeIPv6:
		n := 4
		if v.typ == spoeIPv6 {
			n = 16
		}
		if len(p) < n {
			return v, nil, fmt.Errorf("%w: truncated address", errSPOE)
		}
		v.s = net.IP(p[:n]).String()
		p = p[n:]
	case spoeString, spoeBinary:
		v.s, p, err = readString(p)
	default:
		return v, nil, fmt.Errorf("%w: unknown data type %d", errSPOE, v.typ)
	}
	return v, p, err
}

func appendString(b []byte, s string) []byte {
	b = appendVarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendTyped(b []byte, typ byte, s string, n uint64) []byte {
	b = append(b, typ)
	switch typ {
	case spoeString, spoeBinary:
		return appendString(b, s)
	default:
		return appendVarint(b, n)
	}
}

func appendKV(b []byte, key string, typ byte, s string, n uint64) []byte {
	return appendTyped(appendString(b, key), typ, s, n)
}

// appendSetVar writes a set-var action on a transaction variable (HAProxy
// prefixes the name with the agent's var-prefix).
func appendSetVar(b []byte, name string, typ byte, s string, n uint64) []byte {
	b = append(b, spoeSetVar, 3, spoeScopeTxn)
	b = appendString(b, name)
	return appendTyped(b, typ, s, n)
}
