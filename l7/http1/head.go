package http1

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
)

// Limits on one request head. They bound what a client can make the shim
// hold in memory before a single routing decision is taken.
const (
	MaxHeadBytes   = 64 << 10 // request line + header lines + the blank line
	MaxHeaderLines = 100      // header lines, the request line not counted
)

// Framing says how a message body is delimited on the wire.
type Framing int

const (
	FramingNone    Framing = iota // no body (request without Content-Length or Transfer-Encoding)
	FramingLength                 // Content-Length bytes
	FramingChunked                // Transfer-Encoding: chunked
	FramingClose                  // responses only: the body runs until the upstream closes
)

func (f Framing) String() string {
	switch f {
	case FramingNone:
		return "none"
	case FramingLength:
		return "length"
	case FramingChunked:
		return "chunked"
	case FramingClose:
		return "close"
	}
	return "framing(" + strconv.Itoa(int(f)) + ")"
}

// Header is one header line as the client sent it: name case and order are
// kept so the forwarded head differs from the original only where the shim
// means it to.
type Header struct {
	Name, Value string
}

// Head is one parsed HTTP/1.x request head.
type Head struct {
	Method, Target, Version string // Version is "HTTP/1.1" or "HTTP/1.0"
	Headers                 []Header
	Framing                 Framing
	ContentLength           int64 // valid when Framing == FramingLength
	KeepAlive               bool  // the client allows another request on this connection
	ExpectContinue          bool  // Expect: 100-continue
	Size                    int   // bytes of the head on the wire, blank line included
}

// Get returns the value of the first header named name (case-insensitive)
// and whether there was one.
func (h *Head) Get(name string) (string, bool) {
	for _, f := range h.Headers {
		if strings.EqualFold(f.Name, name) {
			return f.Value, true
		}
	}
	return "", false
}

// Errors of ReadHead. Each maps to the status the shim answers before it
// closes the connection (see HeadErrorStatus).
var (
	ErrMalformedHead = errors.New("l7: malformed request head")            // 400
	ErrHeadTooLarge  = errors.New("l7: request head too large")            // 431
	ErrHeadTimeout   = errors.New("l7: request head not received in time") // 408
	ErrBadFraming    = errors.New("l7: ambiguous or invalid body framing") // 400, a smuggling guard
	ErrHTTPVersion   = errors.New("l7: HTTP version not supported")        // 505 (an HTTP/2 preface, say)
)

// HeadErrorStatus maps a ReadHead error to the HTTP status the shim answers
// with; 0 means answer nothing and just close (the client went away).
func HeadErrorStatus(err error) int {
	switch {
	case errors.Is(err, ErrHeadTooLarge):
		return 431
	case errors.Is(err, ErrHeadTimeout):
		return 408
	case errors.Is(err, ErrMalformedHead), errors.Is(err, ErrBadFraming):
		return 400
	case errors.Is(err, ErrHTTPVersion):
		return 505
	}
	return 0
}

// ReadHead reads one request head from r. pending holds bytes already read
// from the connection and not yet used (the tail of an earlier read); they
// are parsed first. ReadHead reads from r in chunks, so it can read past the
// end of the head: those bytes are returned as rest, never kept in a hidden
// buffer, because they are the start of the body (or of the next pipelined
// request) and the caller, or a kernel datapath after it, must forward them
// first. rest may alias pending or the read buffer.
//
// Deadlines are the caller's: set a read deadline on the connection; a
// timeout becomes ErrHeadTimeout. A connection closed before its first byte
// returns io.EOF, which needs no answer.
func ReadHead(r io.Reader, pending []byte) (h *Head, rest []byte, err error) {
	raw, rest, err := ReadRawHead(r, pending, true)
	if err != nil {
		return nil, nil, err
	}
	h, err = parseHead(raw)
	if err != nil {
		return nil, nil, err
	}
	h.Size = len(raw)
	return h, rest, nil
}

// readRawHead reads until a whole head (through its blank line) is in the
// buffer and splits it from the bytes after it. It is shared by request and
// response heads; a request's first line is judged as soon as it is whole,
// so a request line no HTTP/1.x head starts with (HTTP/0.9's "GET /", a
// word of garbage) is refused at once, not at the head timeout.
func ReadRawHead(r io.Reader, pending []byte, request bool) (raw, rest []byte, err error) {
	buf := pending
	scanned, checked := 0, 0
	lineChecked := !request
	for {
		if !lineChecked {
			lead := 0
			for lead+1 < len(buf) && buf[lead] == '\r' && buf[lead+1] == '\n' {
				lead += 2
			}
			if i := bytes.Index(buf[lead:], []byte("\r\n")); i >= 0 {
				if err := parseRequestLine(string(buf[lead:lead+i]), &Head{}); err != nil {
					return nil, nil, err
				}
				lineChecked = true
			}
		}
		end := headEnd(buf, scanned)
		// Bytes no head may hold are rejected as soon as they arrive,
		// not at the head timeout: a bare LF or CR (which ends a line for
		// some parsers and not for others; a head of such lines never
		// shows the CRLFCRLF searched for) or a control byte (a TLS
		// ClientHello or other binary sent to this plain-text port).
		limit := len(buf)
		if end >= 0 {
			limit = end
		}
		var bad bool
		if bad, checked = badHeadBytes(buf, checked, limit); bad {
			return nil, nil, ErrMalformedHead
		}
		if end >= 0 {
			if end > MaxHeadBytes {
				return nil, nil, ErrHeadTooLarge
			}
			return buf[:end], buf[end:], nil
		}
		if len(buf) > MaxHeadBytes {
			return nil, nil, ErrHeadTooLarge
		}
		// Leave room for three bytes of a terminator that straddles reads.
		scanned = max(0, len(buf)-3)
		if cap(buf)-len(buf) < 4096 {
			nb := make([]byte, len(buf), min(max(2*cap(buf), 8192), MaxHeadBytes+8192))
			copy(nb, buf)
			buf = nb
		}
		n, rerr := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if rerr != nil && n == 0 {
			var ne net.Error
			switch {
			case errors.As(rerr, &ne) && ne.Timeout():
				return nil, nil, ErrHeadTimeout
			case errors.Is(rerr, io.EOF) && len(bytes.TrimLeft(buf, "\r\n")) == 0:
				return nil, nil, io.EOF
			case errors.Is(rerr, io.EOF):
				return nil, nil, ErrMalformedHead
			}
			return nil, nil, rerr
		}
	}
}

// badHeadBytes checks buf[from:to] for bytes a head may not hold: control
// bytes other than HTAB and CRLF, a bare LF, a bare CR. It returns where
// the check stopped: a CR at the end of what has arrived is checked again
// once the byte after it is there.
func badHeadBytes(buf []byte, from, to int) (bad bool, next int) {
	for i := from; i < to; i++ {
		switch c := buf[i]; {
		case c == '\r':
			if i+1 == len(buf) {
				return false, i
			}
			if buf[i+1] != '\n' {
				return true, i
			}
		case c == '\n':
			if i == 0 || buf[i-1] != '\r' {
				return true, i
			}
		case (c < ' ' && c != '\t') || c == 0x7f:
			return true, i
		}
	}
	return false, to
}

// headEnd returns the length of the head including its final CRLFCRLF, or
// -1 if buf does not hold a whole head yet. Empty lines before the request
// line are allowed (RFC 9112 section 2.2) and counted in the head.
func headEnd(buf []byte, from int) int {
	// Skip leading CRLFs so a stray CRLF after a previous body is not taken
	// for an empty head.
	lead := 0
	for lead+1 < len(buf) && buf[lead] == '\r' && buf[lead+1] == '\n' {
		lead += 2
	}
	from = max(from, lead)
	i := bytes.Index(buf[from:], []byte("\r\n\r\n"))
	if i < 0 {
		return -1
	}
	return from + i + 4
}

// parseHead parses a complete head (ending in CRLFCRLF). It is strict where
// leniency lets two parsers disagree about where a message ends (request
// smuggling): bare LF, obs-fold, whitespace before the colon, conflicting
// Content-Length, Content-Length with Transfer-Encoding, and any transfer
// coding other than a lone "chunked" are rejected.
func parseHead(b []byte) (*Head, error) {
	for len(b) >= 2 && b[0] == '\r' && b[1] == '\n' {
		b = b[2:]
	}
	b = b[:len(b)-4] // drop the final CRLFCRLF
	s := string(b)   // one allocation; headers are substrings of it
	if strings.IndexByte(s, '\n') >= 0 && strings.Count(s, "\n") != strings.Count(s, "\r\n") {
		return nil, ErrMalformedHead // bare LF
	}
	lines := strings.Split(s, "\r\n")
	if len(lines)-1 > MaxHeaderLines {
		return nil, ErrHeadTooLarge
	}
	h := &Head{}
	if err := parseRequestLine(lines[0], h); err != nil {
		return nil, err
	}
	h.Headers = make([]Header, 0, len(lines)-1)
	for _, line := range lines[1:] {
		f, err := parseHeaderLine(line)
		if err != nil {
			return nil, err
		}
		h.Headers = append(h.Headers, f)
	}
	if err := h.interpret(); err != nil {
		return nil, err
	}
	return h, nil
}

func parseRequestLine(line string, h *Head) error {
	method, rest, ok := strings.Cut(line, " ")
	if !ok {
		return ErrMalformedHead
	}
	target, version, ok := strings.Cut(rest, " ")
	if !ok || !isToken(method) || target == "" || strings.IndexByte(version, ' ') >= 0 {
		return ErrMalformedHead
	}
	for i := 0; i < len(target); i++ {
		if c := target[i]; c <= ' ' || c == 0x7f {
			return ErrMalformedHead
		}
	}
	version, err := requestVersion(version)
	if err != nil {
		return err
	}
	h.Method, h.Target, h.Version = method, target, version
	return nil
}

// requestVersion checks the HTTP-version of a request line. HTTP/1.0 and
// HTTP/1.1 are spoken; a later 1.x minor is served as 1.1 (RFC 9112
// section 2.3); another major version, such as the HTTP/2 connection
// preface "PRI * HTTP/2.0", is well formed but not spoken here (505).
func requestVersion(v string) (string, error) {
	switch {
	case v == "HTTP/1.1" || v == "HTTP/1.0":
		return v, nil
	case len(v) == len("HTTP/1.1") && strings.HasPrefix(v, "HTTP/") && isDigit(v[5]) && v[6] == '.' && isDigit(v[7]):
		if v[5] == '1' {
			return "HTTP/1.1", nil
		}
		return "", ErrHTTPVersion
	case len(v) == len("HTTP/2") && strings.HasPrefix(v, "HTTP/") && isDigit(v[5]) && v[5] != '1':
		return "", ErrHTTPVersion
	}
	return "", ErrMalformedHead
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func parseHeaderLine(line string) (Header, error) {
	if line == "" || line[0] == ' ' || line[0] == '\t' {
		return Header{}, ErrMalformedHead // obs-fold or stray empty line
	}
	name, value, ok := strings.Cut(line, ":")
	if !ok || !isToken(name) {
		return Header{}, ErrMalformedHead
	}
	value = strings.Trim(value, " \t")
	for i := 0; i < len(value); i++ {
		if c := value[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return Header{}, ErrMalformedHead
		}
	}
	return Header{Name: name, Value: value}, nil
}

// interpret derives framing, keep-alive and Expect from the header list.
func (h *Head) interpret() error {
	var (
		haveCL, haveTE bool
		hosts          int
		conn           []string
	)
	for _, f := range h.Headers {
		switch {
		case strings.EqualFold(f.Name, "Content-Length"):
			n, err := parseContentLength(f.Value)
			if err != nil || (haveCL && n != h.ContentLength) {
				return ErrBadFraming
			}
			haveCL, h.ContentLength = true, n
		case strings.EqualFold(f.Name, "Transfer-Encoding"):
			if haveTE || !strings.EqualFold(f.Value, "chunked") {
				return ErrBadFraming
			}
			haveTE = true
		case strings.EqualFold(f.Name, "Host"):
			hosts++
		case strings.EqualFold(f.Name, "Connection"):
			conn = append(conn, f.Value)
		case strings.EqualFold(f.Name, "Expect"):
			if !strings.EqualFold(f.Value, "100-continue") {
				return ErrMalformedHead
			}
			// RFC 9110 section 10.1.1: a 1.0 client's expectation is
			// ignored (it cannot read an interim response).
			h.ExpectContinue = h.Version != "HTTP/1.0"
		}
	}
	switch {
	case haveCL && haveTE:
		return ErrBadFraming
	case haveTE && h.Version == "HTTP/1.0":
		return ErrBadFraming // a 1.0 peer may not understand chunked
	case haveTE:
		h.Framing = FramingChunked
	case haveCL && h.ContentLength > 0:
		h.Framing = FramingLength
	case haveCL:
		h.Framing = FramingNone // Content-Length: 0
	}
	if hosts > 1 || (hosts == 0 && h.Version == "HTTP/1.1") {
		return ErrMalformedHead
	}
	if h.Version == "HTTP/1.1" {
		h.KeepAlive = !hasToken(conn, "close")
	} else {
		h.KeepAlive = hasToken(conn, "keep-alive") && !hasToken(conn, "close")
	}
	return nil
}

// parseContentLength accepts digits, or a list of identical values
// ("5, 5"), which RFC 9110 section 8.6 lets a recipient fold into one.
func parseContentLength(v string) (int64, error) {
	var n int64 = -1
	for _, part := range strings.Split(v, ",") {
		part = strings.Trim(part, " \t")
		if part == "" || len(part) > 18 {
			return 0, ErrBadFraming
		}
		var x int64
		for i := 0; i < len(part); i++ {
			c := part[i]
			if c < '0' || c > '9' {
				return 0, ErrBadFraming
			}
			x = x*10 + int64(c-'0')
		}
		if n >= 0 && x != n {
			return 0, ErrBadFraming
		}
		n = x
	}
	return n, nil
}

// hasToken reports whether any comma-separated element of values equals
// token (case-insensitive).
func hasToken(values []string, token string) bool {
	for _, v := range values {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.Trim(t, " \t"), token) {
				return true
			}
		}
	}
	return false
}

// isToken reports whether s is a non-empty RFC 9110 token.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x80 || !tokenChar[c] {
			return false
		}
	}
	return true
}

var tokenChar = func() (t [128]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
		t[c-'a'+'A'] = true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()
