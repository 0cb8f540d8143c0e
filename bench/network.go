package bench

import "time"

// clientPath is the network between a virtual run's clients and the
// replicas' front end (docs/sim.md, "The client's network"). Every turn
// opens a new connection, as a Claude Code turn does (a new process each
// turn), so each pays the handshakes and TCP's slow start before the
// replica sees its request, and half a round trip more before the client
// sees the first token, and the last.
type clientPath struct{ rtt time.Duration }

// Segments TCP may send before the first ACK: the initial window of 10
// (RFC 6928, Linux's default) of a 1,448-byte payload (a 1,500-byte MTU
// less IP, TCP and timestamp headers).
const (
	initialWindowSegments = 10
	segmentBytes          = 1448
)

// upload is from the client's send to the request's last byte at the front
// end: the TCP handshake (one round trip), the TLS 1.3 handshake (one
// more), then the body in slow start, the window doubling every round trip
// from the initial one, the last flight arriving half a round trip after it
// left.
func (c clientPath) upload(bodyBytes int64) time.Duration {
	if c.rtt <= 0 {
		return 0
	}
	window, sent, flights := int64(initialWindowSegments*segmentBytes), int64(0), 0
	for sent < bodyBytes || flights == 0 {
		sent += window
		window *= 2
		flights++
	}
	return 2*c.rtt + time.Duration(flights-1)*c.rtt + c.rtt/2
}

// down is how long a byte from the front end takes to reach the client.
func (c clientPath) down() time.Duration { return c.rtt / 2 }
