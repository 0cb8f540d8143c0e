package http1

import (
	"strconv"
	"strings"
	"time"
)

// Headers a client uses to pin its request to one replica itself. The first
// is vLLM's own (one-endpoint shape); the second is the warden's, for the
// per-replica shape.
const (
	RankHeader    = "X-data-parallel-rank"
	ReplicaHeader = "X-Warden-Replica"
)

// hopByHop are the headers that describe one connection, not the message
// (RFC 9110 section 7.6.1). The shim speaks for itself on each side, so it
// drops them and any header the Connection header lists. Transfer-Encoding
// is not among them: bodies are relayed with their framing unchanged.
// Expect is dropped because the shim answers 100-continue itself.
func hopByHop(name string, connListed []string) bool {
	switch {
	case strings.EqualFold(name, "Connection"),
		strings.EqualFold(name, "Keep-Alive"),
		strings.EqualFold(name, "Proxy-Connection"),
		strings.EqualFold(name, "TE"),
		strings.EqualFold(name, "Upgrade"),
		strings.EqualFold(name, "Expect"):
		return true
	}
	for _, t := range connListed {
		if strings.EqualFold(name, t) && !strings.EqualFold(t, "close") && !strings.EqualFold(t, "keep-alive") {
			return true
		}
	}
	return false
}

// connectionTokens lists the tokens of every Connection header.
func connectionTokens(hs []Header) []string {
	var out []string
	for _, f := range hs {
		if strings.EqualFold(f.Name, "Connection") {
			for _, t := range strings.Split(f.Value, ",") {
				if t = strings.Trim(t, " \t"); t != "" {
					out = append(out, t)
				}
			}
		}
	}
	return out
}

// upstreamHead renders the request head sent to the replica: the client's
// request line and headers in their order and case, minus hop-by-hop
// headers and the warden's pinning headers, plus X-data-parallel-rank when
// rank >= 0 (one-endpoint shape: that header is the steering). The upstream
// connection is always HTTP/1.1 keep-alive, whatever the client speaks.
func UpstreamHead(h *Head, rank int, addr string) []byte {
	listed := connectionTokens(h.Headers)
	b := make([]byte, 0, h.Size+64)
	b = append(b, h.Method...)
	b = append(b, ' ')
	b = append(b, h.Target...)
	b = append(b, " HTTP/1.1\r\n"...)
	host, length := false, false
	for _, f := range h.Headers {
		switch {
		case hopByHop(f.Name, listed),
			strings.EqualFold(f.Name, RankHeader),
			strings.EqualFold(f.Name, ReplicaHeader):
			continue
		case strings.EqualFold(f.Name, "Host"):
			host = true
		case strings.EqualFold(f.Name, "Content-Length"):
			// Equal duplicates ("7, 7", or two headers) were accepted;
			// the replica gets one plain value (RFC 9110 section 8.6),
			// which strict parsers such as llhttp require.
			if !length {
				length = true
				b = AppendHeader(b, f.Name, strconv.FormatInt(h.ContentLength, 10))
			}
			continue
		}
		b = AppendHeader(b, f.Name, f.Value)
	}
	if !host { // HTTP/1.0 clients may omit Host; HTTP/1.1 upstreams require it
		b = AppendHeader(b, "Host", addr)
	}
	if rank >= 0 {
		b = AppendHeader(b, RankHeader, strconv.Itoa(rank))
	}
	return append(b, "\r\n"...)
}

// clientResponseHead renders the response head sent to the client: the
// replica's status and headers minus hop-by-hop ones, plus the shim's own
// Connection header for the client connection. dechunk drops
// Transfer-Encoding (the body will be sent as plain data until the close).
func ClientResponseHead(r *ResponseHead, clientVersion string, keepAlive, dechunk bool) []byte {
	listed := connectionTokens(r.Headers)
	b := make([]byte, 0, 512)
	b = append(b, "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(r.Status), 10)
	b = append(b, ' ')
	b = append(b, r.Reason...)
	b = append(b, "\r\n"...)
	for _, f := range r.Headers {
		if hopByHop(f.Name, listed) || (dechunk && strings.EqualFold(f.Name, "Transfer-Encoding")) {
			continue
		}
		b = AppendHeader(b, f.Name, f.Value)
	}
	switch {
	case !keepAlive:
		b = AppendHeader(b, "Connection", "close")
	case clientVersion == "HTTP/1.0":
		b = AppendHeader(b, "Connection", "keep-alive")
	}
	return append(b, "\r\n"...)
}

// ParkedHeader is added to the response of a request that admission kept
// waiting at the warden: the wait in seconds (microsecond resolution), so
// a client (the bench) can tell time parked here from time at the replica.
const ParkedHeader = "X-Warden-Parked-Seconds"

// withParked adds ParkedHeader to a rendered response head when the
// request waited (head ends with the blank line).
func WithParked(head []byte, parked time.Duration) []byte {
	if parked <= 0 {
		return head
	}
	b := AppendHeader(head[:len(head)-2], ParkedHeader, strconv.FormatFloat(parked.Seconds(), 'f', 6, 64))
	return append(b, "\r\n"...)
}

// interimHead renders a 1xx response (other than 101) for the client.
func InterimHead(r *ResponseHead) []byte {
	b := make([]byte, 0, 128)
	b = append(b, "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(r.Status), 10)
	b = append(b, ' ')
	b = append(b, r.Reason...)
	b = append(b, "\r\n"...)
	for _, f := range r.Headers {
		b = AppendHeader(b, f.Name, f.Value)
	}
	return append(b, "\r\n"...)
}

func AppendHeader(b []byte, name, value string) []byte {
	b = append(b, name...)
	b = append(b, ": "...)
	b = append(b, value...)
	return append(b, "\r\n"...)
}
