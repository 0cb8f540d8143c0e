package http1

import (
	"errors"
	"strconv"
	"strings"
)

// ResponseHead is one parsed upstream response head.
type ResponseHead struct {
	Version       string // "HTTP/1.1" or "HTTP/1.0"
	Status        int
	Reason        string
	Headers       []Header
	Framing       Framing
	ContentLength int64 // valid when Framing == FramingLength
	// Reusable: the upstream connection may serve another request once
	// this body has been read (HTTP/1.1, no Connection: close, and a body
	// that does not end with the connection).
	Reusable bool
}

// ErrBadResponse means the upstream sent a head the shim cannot relay
// safely; the client gets 502.
var ErrBadResponse = errors.New("l7: malformed upstream response")

// parseResponseHead parses a raw response head. requestMethod decides
// whether a body follows (never after HEAD), per RFC 9112 section 6.3.
func ParseResponseHead(raw []byte, requestMethod string) (*ResponseHead, error) {
	for len(raw) >= 2 && raw[0] == '\r' && raw[1] == '\n' {
		raw = raw[2:]
	}
	s := string(raw[:len(raw)-4])
	lines := strings.Split(s, "\r\n")
	if len(lines)-1 > MaxHeaderLines {
		return nil, ErrBadResponse
	}
	version, rest, ok := strings.Cut(lines[0], " ")
	if !ok || (version != "HTTP/1.1" && version != "HTTP/1.0") {
		return nil, ErrBadResponse
	}
	code, reason, _ := strings.Cut(rest, " ")
	status, err := strconv.Atoi(code)
	if err != nil || len(code) != 3 || status < 100 {
		return nil, ErrBadResponse
	}
	r := &ResponseHead{Version: version, Status: status, Reason: reason}
	var (
		haveCL, haveTE, chunked bool
		conn                    []string
	)
	for _, line := range lines[1:] {
		f, err := parseHeaderLine(line)
		if err != nil {
			return nil, ErrBadResponse
		}
		r.Headers = append(r.Headers, f)
		switch {
		case strings.EqualFold(f.Name, "Content-Length"):
			n, err := parseContentLength(f.Value)
			if err != nil || (haveCL && n != r.ContentLength) {
				return nil, ErrBadResponse
			}
			haveCL, r.ContentLength = true, n
		case strings.EqualFold(f.Name, "Transfer-Encoding"):
			haveTE = true
			codings := strings.Split(f.Value, ",")
			chunked = strings.EqualFold(strings.Trim(codings[len(codings)-1], " \t"), "chunked")
		case strings.EqualFold(f.Name, "Connection"):
			conn = append(conn, f.Value)
		}
	}
	switch {
	case status < 200 || status == 204 || status == 304 || requestMethod == "HEAD":
		r.Framing = FramingNone
	case haveTE && haveCL:
		return nil, ErrBadResponse
	case haveTE && chunked:
		r.Framing = FramingChunked
	case haveTE:
		r.Framing = FramingClose
	case haveCL && r.ContentLength > 0:
		r.Framing = FramingLength
	case haveCL:
		r.Framing = FramingNone
	default:
		r.Framing = FramingClose
	}
	r.Reusable = version == "HTTP/1.1" && !hasToken(conn, "close") && r.Framing != FramingClose
	return r, nil
}
