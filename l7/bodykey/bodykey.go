// Package bodykey finds the stable start of a chat request body: the
// first system block and the first user message, the part of a
// conversation that every one of its turns sends again unchanged. A client
// that sends no session header is identified by it (docs/placement.md,
// "Conversations"): two requests with the same start share that prefix of
// their prompts, so they belong on the same replica whether or not they
// are one conversation.
//
// It reads only a prefix of the body (what the shim holds when it
// decides: the bytes that came with the request head) and never more; a
// start that does not lie within the prefix is not guessed. It decodes
// nothing: the texts are taken as the JSON has them (escapes and all),
// which is as stable as the client that wrote them, and fields beside
// the texts (cache_control markers, which Claude Code moves to the latest
// message every turn) are left out.
package bodykey

import "errors"

// The most of each text that goes into the start: a system block or a
// first message longer than this is known by its first bytes. The bound
// is what a client's first segment can hold: Go's net/http writes the
// head and the body's first bytes through a 4 KiB buffer, and the shim
// decides on what came with the head; 2.5 KiB of a first message is
// still some 600 tokens of it (past a 512-token system prompt that a
// client sends inside the first message, as Mooncake's traces show).
const (
	MaxSystem = 2560
	MaxUser   = 2560
)

// Why a prefix has no start.
var (
	// ErrShort: the prefix ends before the first user message's text
	// (or its first MaxUser bytes) has been seen.
	ErrShort = errors.New("bodykey: the body's start lies beyond the bytes held")
	// ErrNoStart: the body is not a chat request with a user message
	// (not a JSON object, no messages, or malformed).
	ErrNoStart = errors.New("bodykey: no system block or user message in the body")
)

// Start returns the stable start of the JSON chat request whose first
// bytes are prefix: the first system block (Anthropic's top-level
// "system", or an OpenAI "system" or "developer" message) when it comes
// before the first user message in the body, and the first user message,
// each cut at MaxSystem and MaxUser bytes. A system block that comes after
// the messages (Claude Code and Go's encoding/json put "messages" first)
// is not part of it: whether it would be seen would depend on the body's
// length. The result is a fresh slice, never empty when err is nil.
func Start(prefix []byte) ([]byte, error) {
	s := scanner{b: prefix}
	if err := s.request(); err != nil {
		return nil, err
	}
	out := make([]byte, 0, 2+s.sys.n+s.user.n+1)
	out = append(out, 's')
	out = s.sys.appendTo(out)
	out = append(out, 0, 'u')
	return s.user.appendTo(out), nil
}

// text collects up to max bytes from the spans of one or more JSON
// strings (the text blocks of one message), separated by a zero byte.
type text struct {
	max   int
	n     int
	spans [][2]int
	buf   []byte
}

func (t *text) full() bool { return t.n >= t.max }

// add takes b[from:to] (a string's content), as much as fits.
func (t *text) add(b []byte, from, to int) {
	if t.full() {
		return
	}
	if len(t.spans) > 0 {
		t.n++ // the separator
	}
	to = min(to, from+t.max-t.n)
	t.spans = append(t.spans, [2]int{from, to})
	t.n += to - from
	t.buf = b
}

func (t *text) appendTo(out []byte) []byte {
	for i, sp := range t.spans {
		if i > 0 {
			out = append(out, 0)
		}
		out = append(out, t.buf[sp[0]:sp[1]]...)
	}
	return out
}

// cut is t with at most max bytes.
func (t text) cut(max int) text {
	out := text{max: max, buf: t.buf}
	for _, sp := range t.spans {
		out.add(t.buf, sp[0], sp[1])
	}
	return out
}
