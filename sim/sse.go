package sim

import (
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// responder builds one request's response in its API's shape: SSE events
// while streaming, or the whole JSON body. It follows the reply's plan to
// tell text from a tool call's arguments as the bytes stream out.
type responder struct {
	kind         apiKind
	model        string
	id           string
	callID       string
	created      int64
	promptTokens int
	includeUsage bool
	details      bool // vLLM's --enable-prompt-tokens-details
	plan         replyPlan

	started  bool
	sent     int    // reply bytes streamed so far
	open     string // Anthropic content block open: "", "text" or "tool_use"
	blocks   int    // Anthropic content blocks started
	toolSent bool   // the tool call's head (id, name) went out
}

func newResponder(kind apiKind, req *parsedRequest, id uint64, promptTokens int, plan replyPlan, details bool) *responder {
	o := &responder{kind: kind, model: req.model, created: Epoch.Unix() + int64(id),
		promptTokens: promptTokens, includeUsage: req.includeUsage, details: details, plan: plan}
	switch kind {
	case apiAnthropic:
		o.id = fmt.Sprintf("msg_sim%016x", id)
	case apiChat:
		o.id = fmt.Sprintf("chatcmpl-sim%016x", id)
	default:
		o.id = fmt.Sprintf("cmpl-sim%016x", id)
	}
	// vLLM names tool calls chatcmpl-tool-<32 hex>, on both APIs
	o.callID = fmt.Sprintf("chatcmpl-tool-%016x%016x", mix64(id), mix64(id^0x70_6f6f_6c))
	return o
}

// anthropicUsage is the usage vLLM's Anthropic endpoint reports. With
// prompt-token details (and a cache hit) input_tokens leaves the cache
// reads out, which cache_read_input_tokens carries; without them
// input_tokens is the whole prompt and the cache fields are absent. The
// first event of a stream never has the cache fields (the hit is reported
// with the final usage).
func (o *responder) anthropicUsage(cached, output int, final bool) map[string]any {
	u := map[string]any{"input_tokens": o.promptTokens, "output_tokens": output}
	if final && o.details && cached > 0 {
		u["input_tokens"] = o.promptTokens - cached
		u["cache_creation_input_tokens"] = 0
		u["cache_read_input_tokens"] = cached
	}
	return u
}

// openAIUsage carries prompt_tokens_details.cached_tokens only with
// prompt-token details and a non-zero hit, as vLLM does.
func (o *responder) openAIUsage(cached, output int) map[string]any {
	u := map[string]any{
		"prompt_tokens":     o.promptTokens,
		"completion_tokens": output,
		"total_tokens":      o.promptTokens + output,
	}
	if o.details && cached > 0 {
		u["prompt_tokens_details"] = map[string]any{"cached_tokens": cached}
	}
	return u
}

func appendEvent(buf []byte, event string, v any) []byte {
	b, _ := json.Marshal(v)
	if event != "" {
		buf = append(buf, "event: "...)
		buf = append(buf, event...)
		buf = append(buf, '\n')
	}
	buf = append(buf, "data: "...)
	buf = append(buf, b...)
	return append(buf, '\n', '\n')
}

// start writes what precedes the first token.
func (o *responder) start(buf []byte) []byte {
	if o.started {
		return buf
	}
	o.started = true
	switch o.kind {
	case apiAnthropic:
		buf = appendEvent(buf, "message_start", map[string]any{"type": "message_start", "message": map[string]any{
			"id": o.id, "type": "message", "role": "assistant", "model": o.model, "content": []any{},
			"stop_reason": nil, "stop_sequence": nil, "usage": o.anthropicUsage(0, 0, false),
		}})
	case apiChat:
		buf = o.openAIChunkHead(buf, "chat.completion.chunk")
		buf = append(buf, `"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`+"\n\n"...)
	}
	return buf
}

// delta writes the events of the next reply bytes: text deltas for the
// reply's text, the tool call's head once its name is out, then its
// arguments as they come; the markup around the call shows nowhere.
func (o *responder) delta(buf []byte, piece string) []byte {
	buf = o.start(buf)
	from, to := o.sent, o.sent+len(piece)
	o.sent = to
	if o.kind == apiCompletions {
		return o.completionsDelta(buf, piece)
	}
	if text := clip(piece, from, 0, o.plan.textEnd()); text != "" {
		buf = o.textDelta(buf, text)
	}
	c := o.plan.call
	if c == nil {
		return buf
	}
	if to >= c.argsStart && !o.toolSent {
		o.toolSent = true
		buf = o.toolStart(buf)
	}
	if args := clip(piece, from, c.argsStart, c.argsEnd); args != "" {
		buf = o.argsDelta(buf, args)
	}
	return buf
}

// clip returns the part of piece (which starts at byte from of the reply)
// that falls in [lo, hi).
func clip(piece string, from, lo, hi int) string {
	a, b := max(lo-from, 0), min(hi-from, len(piece))
	if a >= b {
		return ""
	}
	return piece[a:b]
}

func (o *responder) textDelta(buf []byte, text string) []byte {
	if o.kind == apiChat {
		buf = o.openAIChunkHead(buf, "chat.completion.chunk")
		buf = append(buf, `"choices":[{"index":0,"delta":{"content":`...)
		buf = appendJSONString(buf, text)
		return append(buf, `},"logprobs":null,"finish_reason":null}]}`+"\n\n"...)
	}
	if o.open != "text" {
		buf = o.openBlock(buf, map[string]any{"type": "text", "text": ""}, "text")
	}
	buf = append(buf, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":"...)
	buf = strconv.AppendInt(buf, int64(o.blocks-1), 10)
	buf = append(buf, `,"delta":{"type":"text_delta","text":`...)
	buf = appendJSONString(buf, text)
	return append(buf, "}}\n\n"...)
}

func (o *responder) toolStart(buf []byte) []byte {
	name := o.plan.call.name
	if o.kind == apiChat {
		return appendEvent(buf, "", o.openAIChunk(map[string]any{"tool_calls": []any{map[string]any{
			"index": 0, "id": o.callID, "type": "function",
			"function": map[string]any{"name": name, "arguments": ""}}}}, nil))
	}
	return o.openBlock(buf, map[string]any{"type": "tool_use", "id": o.callID, "name": name, "input": map[string]any{}}, "tool_use")
}

func (o *responder) argsDelta(buf []byte, args string) []byte {
	if o.kind == apiChat {
		return appendEvent(buf, "", o.openAIChunk(map[string]any{"tool_calls": []any{map[string]any{
			"index": 0, "function": map[string]any{"arguments": args}}}}, nil))
	}
	return appendEvent(buf, "content_block_delta", map[string]any{"type": "content_block_delta", "index": o.blocks - 1,
		"delta": map[string]any{"type": "input_json_delta", "partial_json": args}})
}

// openBlock closes the open Anthropic block and starts the next one.
func (o *responder) openBlock(buf []byte, block map[string]any, kind string) []byte {
	buf = o.closeBlock(buf)
	buf = appendEvent(buf, "content_block_start", map[string]any{"type": "content_block_start", "index": o.blocks,
		"content_block": block})
	o.blocks++
	o.open = kind
	return buf
}

func (o *responder) closeBlock(buf []byte) []byte {
	if o.open == "" {
		return buf
	}
	o.open = ""
	return appendEvent(buf, "content_block_stop", map[string]any{"type": "content_block_stop", "index": o.blocks - 1})
}

func (o *responder) completionsDelta(buf []byte, text string) []byte {
	buf = o.openAIChunkHead(buf, "text_completion")
	buf = append(buf, `"choices":[{"index":0,"text":`...)
	buf = appendJSONString(buf, text)
	return append(buf, `,"logprobs":null,"finish_reason":null}]}`+"\n\n"...)
}

func (o *responder) openAIChunk(delta map[string]any, finish any) map[string]any {
	return map[string]any{"id": o.id, "object": "chat.completion.chunk", "created": o.created, "model": o.model,
		"choices": []any{map[string]any{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": finish}}}
}

func (o *responder) openAIChunkHead(buf []byte, object string) []byte {
	buf = append(buf, `data: {"id":"`...)
	buf = append(buf, o.id...)
	buf = append(buf, `","object":"`...)
	buf = append(buf, object...)
	buf = append(buf, `","created":`...)
	buf = strconv.AppendInt(buf, o.created, 10)
	buf = append(buf, `,"model":`...)
	buf = appendJSONString(buf, o.model)
	return append(buf, ',')
}

// anthropicStop maps the engine's finish reason to Anthropic's stop_reason,
// as vLLM's adapter does: a finished tool call is tool_use.
func (o *responder) anthropicStop(res Result) (reason string, seq any) {
	switch {
	case res.FinishReason == "stop" && res.StopSequence != "":
		return "stop_sequence", res.StopSequence
	case o.plan.complete(res):
		return "tool_use", nil
	case res.FinishReason == "stop":
		return "end_turn", nil
	default:
		return "max_tokens", nil
	}
}

// openAIFinish is OpenAI's finish_reason: tool_calls for a finished call.
func (o *responder) openAIFinish(res Result) string {
	if o.kind == apiChat && o.plan.complete(res) {
		return "tool_calls"
	}
	return res.FinishReason
}

// end writes the closing events.
func (o *responder) end(buf []byte, res Result, cached int) []byte {
	if res.Err != nil {
		if o.kind == apiAnthropic {
			return appendEvent(buf, "error", map[string]any{"type": "error",
				"error": map[string]any{"type": "api_error", "message": res.Err.Error()}})
		}
		return appendEvent(buf, "", map[string]any{"error": map[string]any{
			"message": res.Err.Error(), "type": "InternalServerError", "param": nil, "code": 500}})
	}
	buf = o.start(buf)
	switch o.kind {
	case apiAnthropic:
		reason, seq := o.anthropicStop(res)
		buf = o.closeBlock(buf)
		buf = appendEvent(buf, "message_delta", map[string]any{"type": "message_delta",
			"delta": map[string]any{"stop_reason": reason, "stop_sequence": seq},
			"usage": o.anthropicUsage(cached, res.OutputTokens, true)})
		return appendEvent(buf, "message_stop", map[string]any{"type": "message_stop"})
	default:
		object, choice := "chat.completion.chunk", map[string]any{"index": 0, "delta": map[string]any{},
			"logprobs": nil, "finish_reason": o.openAIFinish(res)}
		if o.kind == apiCompletions {
			object = "text_completion"
			choice = map[string]any{"index": 0, "text": "", "logprobs": nil, "finish_reason": res.FinishReason}
		}
		buf = appendEvent(buf, "", map[string]any{"id": o.id, "object": object, "created": o.created,
			"model": o.model, "choices": []any{choice}})
		if o.includeUsage {
			buf = appendEvent(buf, "", map[string]any{"id": o.id, "object": object, "created": o.created,
				"model": o.model, "choices": []any{}, "usage": o.openAIUsage(res.CachedTokens, res.OutputTokens)})
		}
		return append(buf, "data: [DONE]\n\n"...)
	}
}

// whole is the non-streaming response body. A finished tool call comes back
// as a tool_use block (tool_calls); one cut short is the raw text, as
// vLLM's tool parser leaves what it cannot parse.
func (o *responder) whole(res Result) []byte {
	var v any
	call := o.plan.call
	done := o.plan.complete(res)
	switch o.kind {
	case apiAnthropic:
		reason, seq := o.anthropicStop(res)
		content := []any{map[string]any{"type": "text", "text": res.OutputText}}
		if done {
			content = content[:0]
			if lead := res.OutputText[:o.plan.textEnd()]; lead != "" {
				content = append(content, map[string]any{"type": "text", "text": lead})
			}
			content = append(content, map[string]any{"type": "tool_use", "id": o.callID, "name": call.name,
				"input": json.RawMessage(call.args)})
		}
		v = map[string]any{"id": o.id, "type": "message", "role": "assistant", "model": o.model,
			"content": content, "stop_reason": reason, "stop_sequence": seq,
			"usage": o.anthropicUsage(res.CachedTokens, res.OutputTokens, true)}
	case apiChat:
		msg := map[string]any{"role": "assistant", "content": res.OutputText}
		if done {
			var lead any
			if t := res.OutputText[:o.plan.textEnd()]; t != "" {
				lead = t
			}
			msg = map[string]any{"role": "assistant", "content": lead, "tool_calls": []any{map[string]any{
				"id": o.callID, "type": "function", "function": map[string]any{"name": call.name, "arguments": call.args}}}}
		}
		v = map[string]any{"id": o.id, "object": "chat.completion", "created": o.created, "model": o.model,
			"choices": []any{map[string]any{"index": 0, "logprobs": nil, "finish_reason": o.openAIFinish(res),
				"message": msg}},
			"usage": o.openAIUsage(res.CachedTokens, res.OutputTokens)}
	default:
		v = map[string]any{"id": o.id, "object": "text_completion", "created": o.created, "model": o.model,
			"choices": []any{map[string]any{"index": 0, "text": res.OutputText, "logprobs": nil,
				"finish_reason": res.FinishReason}},
			"usage": o.openAIUsage(res.CachedTokens, res.OutputTokens)}
	}
	b, _ := json.Marshal(v)
	return b
}

// appendJSONString appends s as a JSON string (invalid UTF-8 becomes U+FFFD).
func appendJSONString(buf []byte, s string) []byte {
	const hex = "0123456789abcdef"
	buf = append(buf, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				buf = append(buf, '\\', c)
			case c == '\n':
				buf = append(buf, '\\', 'n')
			case c == '\r':
				buf = append(buf, '\\', 'r')
			case c == '\t':
				buf = append(buf, '\\', 't')
			case c < 0x20 || c == '<' || c == '>' || c == '&':
				buf = append(buf, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				buf = append(buf, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			buf = append(buf, `\ufffd`...)
		} else {
			buf = append(buf, s[i:i+size]...)
		}
		i += size
	}
	return append(buf, '"')
}
