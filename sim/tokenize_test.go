package sim

import (
	"encoding/json"
	"slices"
	"testing"
)

func TestNextTurnPromptStartsWithPromptAndGeneratedTokens(t *testing.T) {
	system := "You are a coding agent. Be brief."
	hist := []Message{{Role: "user", Content: "fix the failing test in parser.go please"}}
	p := RenderPrompt(system, hist)
	out := "the code will run then done"
	next := RenderPrompt(system, append(hist,
		Message{Role: "assistant", Content: out},
		Message{Role: "user", Content: "now add a benchmark"}))
	want := append(slices.Clone(p), Tokenize(out)...)
	if !slices.Equal(next[:len(want)], want) {
		t.Fatalf("next prompt does not start with prompt + Tokenize(output)")
	}
	if p[len(p)-1] != tokAssistant {
		t.Fatalf("prompt must end with the assistant generation marker")
	}
}

func TestMessageTokensDoNotDependOnPosition(t *testing.T) {
	a := RenderPrompt("sys", []Message{{Role: "user", Content: "hello world!"}})
	b := RenderPrompt("system prompt x", []Message{{Role: "user", Content: "hello world!"}})
	ta, tb := Tokenize("hello world!"), Tokenize("hello world!")
	if !slices.Equal(a[len(a)-2-len(ta):len(a)-2], ta) || !slices.Equal(b[len(b)-2-len(tb):len(b)-2], tb) {
		t.Fatal("message content tokens changed with what precedes them")
	}
}

func TestTokenizeIsAboutFourBytesAToken(t *testing.T) {
	if n := len(Tokenize("abcdefghi")); n != 3 {
		t.Fatalf("9 bytes gave %d tokens, want 3", n)
	}
	if slices.Equal(Tokenize("ab"), Tokenize("\x00\x00ab")) {
		t.Fatal("short chunk collides with padded chunk")
	}
	for _, tok := range Tokenize("\x00\x01\x02\x03 any text") {
		if tok < firstTextToken {
			t.Fatalf("text produced marker-range token %d", tok)
		}
	}
}

func TestSystemStringAndTextBlocksRenderTheSame(t *testing.T) {
	s1, err := FlattenContent(json.RawMessage(`"be brief"`))
	if err != nil {
		t.Fatal(err)
	}
	s2, err := FlattenContent(json.RawMessage(`[{"type":"text","text":"be brief","cache_control":{"type":"ephemeral"}}]`))
	if err != nil {
		t.Fatal(err)
	}
	if s1 != s2 {
		t.Fatalf("string %q and text block %q differ", s1, s2)
	}
	tu, err := FlattenContent(json.RawMessage(`[{"type":"text","text":"ok"}, {"type":"tool_use", "id":"t1","name":"Read","input":{"path":"a"}}]`))
	if err != nil {
		t.Fatal(err)
	}
	// the call renders as the model's markup, arguments canonical, no id
	if tu != "ok\n"+`<tool_call>{"name":"Read","arguments":{"path":"a"}}</tool_call>` {
		t.Fatalf("tool_use rendered as %q", tu)
	}
}

func TestOutputPiecesAreOneTokenEach(t *testing.T) {
	for _, w := range outputWords {
		if len(w) != BytesPerToken {
			t.Fatalf("output word %q is not %d bytes", w, BytesPerToken)
		}
	}
}

func TestToolDefinitionsRenderInTheSystemTurn(t *testing.T) {
	a, err := decodeAnthropic([]byte(`{"max_tokens":1,"system":"sys","tools":[{"name":"Read","input_schema":{}}],"messages":[{"role":"user","content":"u"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	c, err := decodeChat([]byte(`{"messages":[{"role":"system","content":"sys"},{"role":"user","content":"u"}],"tools":[{"name":"Read","input_schema":{}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a.tokens(), c.tokens()) {
		t.Fatal("the same system, tools and messages render differently through the two APIs")
	}
	if a.system != "sys\n\n"+`[{"name":"Read","input_schema":{}}]` {
		t.Fatalf("system section %q", a.system)
	}
}
