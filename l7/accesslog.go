package l7

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/lmwarden/lmwarden/agent/placement"
	"github.com/lmwarden/lmwarden/l7/datapath"
	"github.com/lmwarden/lmwarden/l7/http1"
)

// The access log: one line a request, as nginx and Envoy write one, at
// info level on Options.AccessLog (nil: off). Its fields, in order (the
// format is documented in docs/serve.md, "Access log"):
//
//	msg=access model client method path conversation session agent
//	replica kind status ttfb duration parked bytes_in bytes_out
//
// The session and agent are the keyed hashes placement uses (16 hex
// digits), never the raw ids, and nothing of the body is written: the
// path is the request target without its query (a query may carry a
// key), cut at maxAccessPath bytes.
const (
	accessMsg     = "access"
	maxAccessPath = 128
	// statusClientGone is nginx's 499: the client left before it had an
	// answer (the request counts in lmwarden_shim_abandoned_total).
	statusClientGone = 499
)

// accessRecord gathers one request's line while the exchange runs.
type accessRecord struct {
	start time.Time
	head  *http1.Head
	key   RoutingKey
	p     *placement.Placement // nil until placed
	x     *exchange            // nil until connected
}

// beginAccess starts the record of the request h on c (nil when the
// access log is off) and clears c's answered status, which the shim's own
// answers set (rejectAnswer).
func (s *Shim) beginAccess(c *datapath.Conn, h *http1.Head, key RoutingKey, start time.Time) *accessRecord {
	c.Answered = 0
	if s.opts.AccessLog == nil {
		return nil
	}
	return &accessRecord{start: start, head: h, key: key}
}

// endAccess writes the line of the request a recorded.
func (s *Shim) endAccess(c *datapath.Conn, a *accessRecord) {
	if a == nil {
		return
	}
	end := time.Now()
	if c.Answered != 0 && c.AnsweredAt.Before(end) {
		end = c.AnsweredAt // not the linger that follows the warden's own answer
	}
	status, replica, kind := c.Answered, -1, "-"
	var ttfb, parked time.Duration = -1, 0
	var up, down int64
	if a.p != nil {
		replica, kind = a.p.Replica, a.p.Kind.String()
	}
	if x := a.x; x != nil {
		if status == 0 {
			status = x.statusGot()
		}
		if !x.firstAt.IsZero() {
			ttfb = x.firstAt.Sub(a.start)
		} else if !x.headAt.IsZero() {
			ttfb = x.headAt.Sub(a.start)
		} else if !x.FirstByteAt.IsZero() {
			ttfb = x.FirstByteAt.Sub(a.start) // a head the kernel carried
		}
		parked, up, down = x.parked, x.BodyBytesUp, x.BodyBytesDown
	}
	if status == 0 {
		status = statusClientGone
	}
	session, agent := "-", "-"
	if a.p != nil && a.p.SessionHash != 0 {
		session = hex16(a.p.SessionHash)
	}
	if a.key.AgentID != "" {
		agent = hex16(s.placer.HashSession(a.key.AgentID))
	}
	s.opts.AccessLog.LogAttrs(context.Background(), slog.LevelInfo, accessMsg,
		slog.String("model", s.placer.Name()),
		slog.String("client", c.RemoteAddr().String()),
		slog.String("method", a.head.Method),
		slog.String("path", accessPath(a.head.Target)),
		slog.String("conversation", conversationOf(a.key)),
		slog.String("session", session),
		slog.String("agent", agent),
		slog.Int("replica", replica),
		slog.String("kind", kind),
		slog.Int("status", status),
		slog.Float64("ttfb", seconds(ttfb)),
		slog.Float64("duration", seconds(end.Sub(a.start))),
		slog.Float64("parked", seconds(parked)),
		slog.Int64("bytes_in", up),
		slog.Int64("bytes_out", down),
	)
}

// statusGot is the status of the replica's response the client got (0:
// none): the head the shim relayed, or one a kernel datapath carried
// before the exchange failed (the shim never read that one).
func (x *exchange) statusGot() int {
	switch {
	case x.Response != nil:
		return x.Response.Status
	case x.carriedStatus != 0:
		return x.carriedStatus
	}
	if cs, known := x.recordedCut(); known && cs.Began {
		return cs.Status
	}
	return 0
}

// accessBadHead writes the line of a head the shim refused before any
// exchange (400, 408, 431, 505): what is known is the client and status.
func (s *Shim) accessBadHead(c *datapath.Conn, status int, start time.Time) {
	if s.opts.AccessLog == nil {
		return
	}
	end := time.Now()
	if c.Answered != 0 {
		end = c.AnsweredAt
	}
	s.opts.AccessLog.LogAttrs(context.Background(), slog.LevelInfo, accessMsg,
		slog.String("model", s.placer.Name()), slog.String("client", c.RemoteAddr().String()),
		slog.String("method", "-"), slog.String("path", "-"), slog.String("conversation", "-"),
		slog.String("session", "-"), slog.String("agent", "-"), slog.Int("replica", -1), slog.String("kind", "-"),
		slog.Int("status", status), slog.Float64("ttfb", -1), slog.Float64("duration", seconds(end.Sub(start))),
		slog.Float64("parked", 0), slog.Int64("bytes_in", 0), slog.Int64("bytes_out", 0))
}

// conversationOf says what keyed the request's conversation, as
// lmwarden_conversation_requests_total{key} does.
func conversationOf(k RoutingKey) string {
	switch {
	case k.SessionID != "" && k.AgentID != "":
		return "subagent"
	case k.SessionID != "":
		return "session"
	case k.BodyStart != nil:
		return "body"
	}
	return "none"
}

// accessPath is the target without its query, printable and bounded.
func accessPath(target string) string {
	p, _, _ := strings.Cut(target, "?")
	if len(p) > maxAccessPath {
		p = p[:maxAccessPath]
	}
	return strings.Map(func(r rune) rune {
		if r < 0x21 || r == 0x7f {
			return '_'
		}
		return r
	}, p)
}

func hex16(h uint64) string {
	s := strconv.FormatUint(h, 16)
	return strings.Repeat("0", 16-len(s)) + s
}

// seconds rounds to the millisecond; a negative d (not known) stays -1.
func seconds(d time.Duration) float64 {
	if d < 0 {
		return -1
	}
	return float64(d.Milliseconds()) / 1000
}
