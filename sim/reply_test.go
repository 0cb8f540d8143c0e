package sim

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"testing"
)

func TestReplyLengthsFollowTheDistributionAndRepeatPerPrompt(t *testing.T) {
	m := DefaultReplies
	var lens []int
	for seed := range uint64(4000) {
		p := m.plan(mix64(seed), nil, toolChoice{mode: "auto"}, 0)
		if p.call != nil {
			t.Fatal("a tool call without tools")
		}
		lens = append(lens, len(Tokenize(p.text)))
		if again := m.plan(mix64(seed), nil, toolChoice{mode: "auto"}, 0); again.text != p.text {
			t.Fatal("the same seed drew another reply")
		}
	}
	sort.Ints(lens)
	med, p90 := lens[len(lens)/2], lens[len(lens)*9/10]
	// lognormal:250:1: median 250, 90th percentile 250·e^1.2816 = 900
	if math.Abs(float64(med)-250)/250 > 0.08 || math.Abs(float64(p90)-900)/900 > 0.12 {
		t.Fatalf("median %d (want ~250), p90 %d (want ~900)", med, p90)
	}
	d, err := ParseLengthDist("uniform:10:20")
	if err != nil {
		t.Fatal(err)
	}
	for seed := range uint64(500) {
		if n := d.draw(unit(seed, 1), unit(seed, 2)); n < 10 || n > 20 {
			t.Fatalf("uniform:10:20 drew %d", n)
		}
	}
	for _, bad := range []string{"", "lognormal", "lognormal:0:1", "uniform:5:2", "fixed:0", "normal:3:4", "fixed:x"} {
		if _, err := ParseLengthDist(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestRepliesEndByThemselvesUnlessMaxTokensCutsThem(t *testing.T) {
	s := mustServe(t, ServerConfig{Replicas: 1, Replies: ReplyModel{Lengths: LengthDist{Kind: "fixed", A: 40}}})
	u := s.URLs()[0]
	ask := func(path string, body map[string]any) map[string]any {
		t.Helper()
		code, out := mustPost(t, u+path, body)
		if code != 200 {
			t.Fatalf("%d %s", code, out)
		}
		var v map[string]any
		json.Unmarshal(out, &v)
		return v
	}
	msgs := []map[string]any{{"role": "user", "content": textOf("q", 100)}}
	for _, c := range []struct {
		max           int
		extra         map[string]any
		reason, usage string
		tokens        float64
	}{
		{4096, nil, "end_turn", "", 40},
		{16, nil, "max_tokens", "", 16},
		{64, map[string]any{"ignore_eos": true}, "max_tokens", "", 64}, // the bench's exact sizes
	} {
		body := map[string]any{"model": "m", "max_tokens": c.max, "messages": msgs}
		for k, v := range c.extra {
			body[k] = v
		}
		v := ask("/v1/messages", body)
		if v["stop_reason"] != c.reason || v["usage"].(map[string]any)["output_tokens"] != c.tokens {
			t.Errorf("max_tokens %d %v: stop_reason %v, usage %v", c.max, c.extra, v["stop_reason"], v["usage"])
		}
	}
	// OpenAI: no max_tokens is the rest of the context; the reply stops by itself
	v := ask("/v1/chat/completions", map[string]any{"model": "m", "messages": msgs})
	ch := v["choices"].([]any)[0].(map[string]any)
	if ch["finish_reason"] != "stop" || v["usage"].(map[string]any)["completion_tokens"] != 40.0 {
		t.Errorf("chat: %v %v", ch["finish_reason"], v["usage"])
	}
	v = ask("/v1/chat/completions", map[string]any{"model": "m", "messages": msgs, "max_tokens": 8})
	if ch := v["choices"].([]any)[0].(map[string]any); ch["finish_reason"] != "length" {
		t.Errorf("chat cut at 8: %v", ch["finish_reason"])
	}
	v = ask("/v1/chat/completions", map[string]any{"model": "m", "messages": msgs, "min_tokens": 70})
	if v["usage"].(map[string]any)["completion_tokens"] != 70.0 {
		t.Errorf("min_tokens 70: %v", v["usage"])
	}
}

// agentTools are tools of the shapes a coding agent offers.
func agentTools() []map[string]any {
	var out []map[string]any
	for i, src := range toolSchemas[:5] {
		var schema map[string]any
		json.Unmarshal([]byte(src), &schema)
		out = append(out, map[string]any{"name": fmt.Sprintf("tool%d", i), "description": "a tool", "input_schema": schema})
	}
	return out
}

// streamed is what one streamed Anthropic response said.
type streamed struct {
	events     []string
	text       string
	toolID     string
	toolName   string
	toolInput  string
	stopReason string
	cacheRead  int
	inputTok   int
}

func readAnthropicStream(t *testing.T, body []byte) streamed {
	t.Helper()
	names, data := sseEvents(t, body)
	var r streamed
	r.events = names
	for k, n := range names {
		var ev struct {
			ContentBlock struct {
				Type, ID, Name string
			} `json:"content_block"`
			Delta struct {
				Type        string `json:"type"`
				Text        string `json:"text"`
				PartialJSON string `json:"partial_json"`
				StopReason  string `json:"stop_reason"`
			} `json:"delta"`
			Usage struct {
				Input     int `json:"input_tokens"`
				CacheRead int `json:"cache_read_input_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal([]byte(data[k]), &ev); err != nil {
			t.Fatalf("%s: %v", data[k], err)
		}
		switch n {
		case "content_block_start":
			if ev.ContentBlock.Type == "tool_use" {
				r.toolID, r.toolName = ev.ContentBlock.ID, ev.ContentBlock.Name
			}
		case "content_block_delta":
			r.text += ev.Delta.Text
			r.toolInput += ev.Delta.PartialJSON
		case "message_delta":
			r.stopReason, r.cacheRead, r.inputTok = ev.Delta.StopReason, ev.Usage.CacheRead, ev.Usage.Input
		}
	}
	return r
}

// TestToolCallsRunAnAgentLoopAndEveryTurnHitsTheCache plays an agent: it
// offers tools, runs each call it gets (a tool_result in the next request)
// and checks the stream's shape, the arguments against the schema, and that
// each request finds the whole previous prompt and reply in the cache.
func TestToolCallsRunAnAgentLoopAndEveryTurnHitsTheCache(t *testing.T) {
	s := mustServe(t, ServerConfig{Replicas: 1, Replies: ReplyModel{Lengths: LengthDist{Kind: "fixed", A: 30}, ToolUse: 0.6}})
	u := s.URLs()[0] + "/v1/messages"
	tools := agentTools()
	validators := map[string]int{}
	for i := range tools {
		validators[fmt.Sprintf("tool%d", i)] = i
	}
	msgs := []map[string]any{{"role": "user", "content": textOf("task", 400)}}
	calls, texts, prevPrompt := 0, 0, 0
	for turn := range 12 {
		code, body := mustPost(t, u, map[string]any{"model": "m", "max_tokens": 4096, "stream": true,
			"system": textOf("sys", 300), "tools": tools, "messages": msgs})
		if code != 200 {
			t.Fatalf("%d %s", code, body)
		}
		r := readAnthropicStream(t, body)
		if turn > 0 && r.cacheRead < prevPrompt/16*16 {
			t.Fatalf("turn %d: %d tokens cached, want the previous prompt and reply (%d+)", turn, r.cacheRead, prevPrompt)
		}
		prompt := r.inputTok + r.cacheRead
		var content []map[string]any
		if r.text != "" {
			content = append(content, map[string]any{"type": "text", "text": r.text})
		}
		switch r.stopReason {
		case "tool_use":
			calls++
			i, ok := validators[r.toolName]
			if !ok || !strings.HasPrefix(r.toolID, "chatcmpl-tool-") {
				t.Fatalf("tool %q id %q", r.toolName, r.toolID)
			}
			v, err := jsonschemaValue(r.toolInput)
			if err != nil {
				t.Fatalf("tool input %q: %v", r.toolInput, err)
			}
			if err := compileSchema(t, i, toolSchemas[i]).Validate(v); err != nil {
				t.Fatalf("tool input %s invalid: %v", r.toolInput, err)
			}
			want := []string{"message_start"}
			if r.text != "" {
				want = append(want, "content_block_start", "content_block_delta", "content_block_stop")
			}
			want = append(want, "content_block_start", "content_block_delta", "content_block_stop", "message_delta", "message_stop")
			if got := slices.Compact(slices.Clone(r.events)); !slices.Equal(got, want) {
				t.Fatalf("events %v, want %v", got, want)
			}
			var input any
			json.Unmarshal([]byte(r.toolInput), &input)
			content = append(content, map[string]any{"type": "tool_use", "id": r.toolID, "name": r.toolName, "input": input})
			msgs = append(msgs, map[string]any{"role": "assistant", "content": content},
				map[string]any{"role": "user", "content": []map[string]any{{"type": "tool_result", "tool_use_id": r.toolID,
					"content": textOf(fmt.Sprintf("out%d", turn), 50)}}})
		case "end_turn":
			texts++
			msgs = append(msgs, map[string]any{"role": "assistant", "content": content},
				map[string]any{"role": "user", "content": textOf(fmt.Sprintf("next%d", turn), 20)})
		default:
			t.Fatalf("turn %d: stop reason %q", turn, r.stopReason)
		}
		prevPrompt = prompt
	}
	if calls == 0 || texts == 0 {
		t.Fatalf("%d tool calls and %d text replies in 12 turns", calls, texts)
	}
}

func jsonschemaValue(s string) (any, error) {
	d := json.NewDecoder(strings.NewReader(s))
	d.UseNumber()
	var v any
	return v, d.Decode(&v)
}

func TestToolChoiceForcesOrForbidsACall(t *testing.T) {
	s := mustServe(t, ServerConfig{Replicas: 1, Replies: ReplyModel{Lengths: LengthDist{Kind: "fixed", A: 10}, ToolUse: 0.5}})
	base := s.URLs()[0]
	msgs := []map[string]any{{"role": "user", "content": "q"}}
	openaiTools := []map[string]any{{"type": "function", "function": map[string]any{"name": "get", "parameters": map[string]any{
		"type": "object", "properties": map[string]any{"id": map[string]any{"type": "integer", "minimum": 3, "maximum": 3}}, "required": []string{"id"}}}}}
	for i := range 6 {
		m := []map[string]any{{"role": "user", "content": fmt.Sprintf("question %d", i)}}
		_, body := mustPost(t, base+"/v1/chat/completions", map[string]any{"model": "m", "messages": m, "tools": openaiTools, "tool_choice": "required"})
		var v struct {
			Choices []struct {
				FinishReason string `json:"finish_reason"`
				Message      struct {
					ToolCalls []struct {
						ID       string
						Function struct{ Name, Arguments string }
					} `json:"tool_calls"`
				}
			}
		}
		json.Unmarshal(body, &v)
		if v.Choices[0].FinishReason != "tool_calls" || len(v.Choices[0].Message.ToolCalls) != 1 ||
			v.Choices[0].Message.ToolCalls[0].Function.Arguments != `{"id":3}` {
			t.Fatalf("required: %s", body)
		}
		_, body = mustPost(t, base+"/v1/messages", map[string]any{"model": "m", "max_tokens": 100, "messages": m,
			"tools": agentTools(), "tool_choice": map[string]any{"type": "none"}})
		if !strings.Contains(string(body), `"stop_reason":"end_turn"`) {
			t.Fatalf("none: %s", body)
		}
	}
	code, body := mustPost(t, base+"/v1/messages", map[string]any{"model": "m", "max_tokens": 100, "messages": msgs,
		"tools": agentTools(), "tool_choice": map[string]any{"type": "tool", "name": "nope"}})
	if code != 400 || !strings.Contains(string(body), "invalid_request_error") {
		t.Fatalf("unknown named tool: %d %s", code, body)
	}
}

func TestOpenAIStreamsToolCallDeltas(t *testing.T) {
	s := mustServe(t, ServerConfig{Replicas: 1, Replies: ReplyModel{Lengths: LengthDist{Kind: "fixed", A: 10}, ToolUse: 1}})
	tools := []map[string]any{{"type": "function", "function": map[string]any{"name": "edit", "parameters": json.RawMessage(toolSchemas[4])}}}
	_, body := mustPost(t, s.URLs()[0]+"/v1/chat/completions", map[string]any{"model": "m", "stream": true,
		"messages": []map[string]any{{"role": "user", "content": "fix it"}}, "tools": tools})
	_, data := sseEvents(t, body)
	var args, name, id, finish string
	for _, d := range data {
		if d == "[DONE]" {
			continue
		}
		var ch struct {
			Choices []struct {
				Delta struct {
					ToolCalls []struct {
						Index    int
						ID       string
						Function struct{ Name, Arguments string }
					} `json:"tool_calls"`
				}
				FinishReason *string `json:"finish_reason"`
			}
		}
		json.Unmarshal([]byte(d), &ch)
		for _, c := range ch.Choices {
			for _, tc := range c.Delta.ToolCalls {
				if tc.ID != "" {
					id, name = tc.ID, tc.Function.Name
				}
				args += tc.Function.Arguments
			}
			if c.FinishReason != nil {
				finish = *c.FinishReason
			}
		}
	}
	v, err := jsonschemaValue(args)
	if err != nil || name != "edit" || id == "" || finish != "tool_calls" {
		t.Fatalf("name %q id %q finish %q args %q (%v)", name, id, finish, args, err)
	}
	if err := compileSchema(t, 4, toolSchemas[4]).Validate(v); err != nil {
		t.Fatalf("%s: %v", args, err)
	}
}

// TestCacheFieldsFollowVLLMsPromptTokensDetails: with the details (the
// simulator's default) a hit shows as cache_read_input_tokens and
// cached_tokens; without them, as vLLM's default, neither appears and
// Anthropic's input_tokens is the whole prompt.
func TestCacheFieldsFollowVLLMsPromptTokensDetails(t *testing.T) {
	for _, hide := range []bool{false, true} {
		s := mustServe(t, ServerConfig{Replicas: 1, NoPromptTokensDetails: hide})
		body := map[string]any{"model": "m", "max_tokens": 5, "system": textOf("sys", 400),
			"messages": []map[string]any{{"role": "user", "content": "hi"}}}
		mustPost(t, s.URLs()[0]+"/v1/messages", body)
		_, out := mustPost(t, s.URLs()[0]+"/v1/messages", body)
		var a struct{ Usage map[string]int }
		json.Unmarshal(out, &a)
		_, out = mustPost(t, s.URLs()[0]+"/v1/chat/completions", chatBody(textOf("sys", 400), "x", 3))
		_, out2 := mustPost(t, s.URLs()[0]+"/v1/chat/completions", chatBody(textOf("sys", 400), "y", 3))
		hasDetails := strings.Contains(string(out2), "cached_tokens")
		_, hasRead := a.Usage["cache_read_input_tokens"]
		if hide == hasRead || hide == hasDetails {
			t.Errorf("hide=%v: Anthropic usage %v, OpenAI %s", hide, a.Usage, out2)
		}
		if prompt := a.Usage["input_tokens"] + a.Usage["cache_read_input_tokens"]; prompt < 400 || (hide && a.Usage["input_tokens"] < 400) {
			t.Errorf("hide=%v: usage %v", hide, a.Usage)
		}
		_ = out
	}
}

func TestAToolSaidNeverToBeCalledIsNotCalled(t *testing.T) {
	tools, err := parseTools(json.RawMessage(`[
		{"name": "Read", "description": "Reads a file.", "input_schema": {"type": "object"}},
		{"name": "DeferredToolPlaceholder", "description": "Reserved placeholder that keeps deferred tool loading active; never call this tool.", "input_schema": {"type": "object"}}]`))
	if err != nil {
		t.Fatal(err)
	}
	for seed := range uint64(200) {
		if tool, ok := pickTool(seed, tools, toolChoice{mode: "any"}, 1); !ok || tool.name != "Read" {
			t.Fatalf("seed %d: called %q (%v)", seed, tool.name, ok)
		}
	}
	if tool, ok := pickTool(1, tools, toolChoice{mode: "tool", name: "DeferredToolPlaceholder"}, 1); !ok || tool.name != "DeferredToolPlaceholder" {
		t.Fatalf("named choice: %q %v", tool.name, ok)
	}
	only := tools[1:]
	if _, ok := pickTool(1, only, toolChoice{mode: "auto"}, 1); ok {
		t.Fatal("auto called the only, reserved tool")
	}
	if tool, ok := pickTool(1, only, toolChoice{mode: "any"}, 1); !ok || tool.name != "DeferredToolPlaceholder" {
		t.Fatalf("a required call with only a reserved tool: %q %v", tool.name, ok)
	}
}
