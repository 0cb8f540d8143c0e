package bodykey

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// The bodies the start is taken from: what the bench, the SDKs and Claude
// Code send (their field order included).
var (
	// Go's encoding/json of a map: keys sorted, "messages" before "system".
	anthropicSorted = `{"ignore_eos":true,"max_tokens":256,"messages":[{"role":"user","content":"first question"},{"role":"assistant","content":"an answer"},{"role":"user","content":"next"}],"model":"m","stream":true,"system":"you are helpful"}`
	// The Anthropic SDK's order: system first.
	anthropicSystemFirst = `{"model":"m","system":[{"type":"text","text":"you are helpful","cache_control":{"type":"ephemeral"}},{"type":"text","text":"more rules"}],"messages":[{"role":"user","content":[{"type":"text","text":"<reminder>"},{"type":"text","text":"first question","cache_control":{"type":"ephemeral"}}]}],"max_tokens":10}`
	// The same conversation a turn later: the cache_control marker moved
	// to the latest message.
	anthropicSystemFirstTurn2 = `{"model":"m","system":[{"type":"text","text":"you are helpful","cache_control":{"type":"ephemeral"}},{"type":"text","text":"more rules"}],"messages":[{"role":"user","content":[{"type":"text","text":"<reminder>"},{"type":"text","text":"first question"}]},{"role":"assistant","content":[{"type":"text","text":"ok"}]},{"role":"user","content":[{"type":"text","text":"go on","cache_control":{"type":"ephemeral"}}]}],"max_tokens":10}`
	openAI                    = `{"model":"m","messages":[{"role":"system","content":"you are helpful"},{"role":"user","content":"first question"}],"stream":true}`
	// Claude Code 2.1: messages first, a system message after the first
	// user message.
	claudeCode = `{"model":"qwen3-4b","messages":[{"role":"user","content":"Read main.go"},{"role":"system","content":[{"type":"text","text":"# Environment"}]}],"system":[{"type":"text","text":"You are Claude Code"}],"tools":[],"max_tokens":4096,"stream":true}`
)

func mustStart(t *testing.T, body string) []byte {
	t.Helper()
	got, err := Start([]byte(body))
	if err != nil {
		t.Fatalf("Start(%.60s...): %v", body, err)
	}
	return got
}

func TestStartIsTheSystemBlockBeforeAndTheFirstUserMessage(t *testing.T) {
	for _, c := range []struct {
		name, body, want string
	}{
		{"system after the messages is not part of it", anthropicSorted, "s\x00ufirst question"},
		{"Anthropic system blocks: the first one", anthropicSystemFirst, "syou are helpful\x00u<reminder>\x00first question"},
		{"OpenAI system message", openAI, "syou are helpful\x00ufirst question"},
		{"Claude Code", claudeCode, "s\x00uRead main.go"},
		{"content before role", `{"messages":[{"content":"hi","role":"user"}]}`, "s\x00uhi"},
		{"escapes kept as sent", `{"messages":[{"role":"user","content":"a\"b\\u00e9"}]}`, "s\x00ua\\\"b\\\\u00e9"},
	} {
		if got := mustStart(t, c.body); string(got) != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

func TestLaterTurnsOfAConversationHaveItsStart(t *testing.T) {
	if a, b := mustStart(t, anthropicSystemFirst), mustStart(t, anthropicSystemFirstTurn2); !bytes.Equal(a, b) {
		t.Errorf("turn 1 %q, turn 2 %q: the moved cache_control marker must not change the start", a, b)
	}
	other := strings.Replace(openAI, "first question", "another question", 1)
	if bytes.Equal(mustStart(t, openAI), mustStart(t, other)) {
		t.Error("two first messages, one start")
	}
}

// Every prefix of a body gives its start or ErrShort, never another start:
// a conversation's key must not depend on how many bytes came with its
// request head.
func TestEveryPrefixGivesTheStartOrShort(t *testing.T) {
	long := strings.Repeat("x", MaxUser+100)
	bodies := []string{anthropicSorted, anthropicSystemFirst, anthropicSystemFirstTurn2, openAI, claudeCode,
		`{"messages":[{"role":"user","content":"` + long + `"}]}`,
		`{"messages":[{"role":"user","content":[{"type":"text","text":"` + long[:MaxUser-3] + `"},{"type":"text","text":"abcdef"}]}]}`,
		`{"system":"` + long + `","messages":[{"role":"user","content":"q"}]}`,
	}
	for _, body := range bodies {
		full := mustStart(t, body)
		for n := range len(body) {
			got, err := Start([]byte(body[:n]))
			if err == nil && !bytes.Equal(got, full) {
				t.Fatalf("prefix %d of %.60s...: %q, the whole body's %q", n, body, got, full)
			}
			if err != nil && !errors.Is(err, ErrShort) {
				t.Fatalf("prefix %d of %.60s...: %v, want ErrShort", n, body, err)
			}
		}
	}
}

func TestALongFirstMessageIsKnownByItsFirstBytes(t *testing.T) {
	head := strings.Repeat("y", MaxUser)
	body := `{"messages":[{"role":"user","content":"` + head + `tail beyond the prefix`
	got, err := Start([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if want := "s\x00u" + head; string(got) != want {
		t.Errorf("start of %d bytes, want the first %d of the message", len(got), MaxUser)
	}
}

func TestBodiesWithoutAStart(t *testing.T) {
	for _, body := range []string{
		``, `[]`, `{}`, `not json`, `{"prompt":"completions have no messages"}`,
		`{"messages":[]}`, `{"messages":[{"role":"assistant","content":"x"}]}`,
		`{"messages":[{"role":"user","content":""}]}`,
		`{"messages":[{"role":"user","content":"a` + "\n" + `"}]}`,
	} {
		if _, err := Start([]byte(body)); err == nil {
			t.Errorf("%q: a start", body)
		}
	}
	deep := strings.Repeat(`{"a":`, 100)
	if _, err := Start([]byte(deep)); !errors.Is(err, ErrNoStart) {
		t.Errorf("100 levels deep: %v, want ErrNoStart", err)
	}
}

// FuzzStartOfAPrefix holds the prefix property for any body: a prefix
// yields the whole body's start or an error, and a prefix of a valid body
// that has no start has none either.
func FuzzStartOfAPrefix(f *testing.F) {
	for _, b := range []string{anthropicSorted, anthropicSystemFirst, openAI, claudeCode} {
		f.Add([]byte(b), uint16(len(b)/2))
	}
	f.Fuzz(func(t *testing.T, body []byte, cut uint16) {
		full, ferr := Start(body)
		n := int(cut) % (len(body) + 1)
		got, err := Start(body[:n])
		if err != nil {
			return
		}
		if ferr == nil && !bytes.Equal(got, full) {
			t.Fatalf("prefix %d: %q, whole body %q", n, got, full)
		}
		if !json.Valid(body) {
			return
		}
		if ferr != nil {
			t.Fatalf("prefix %d has a start %q, the whole valid body none (%v)", n, got, ferr)
		}
	})
}
