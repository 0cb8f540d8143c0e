package sim

import (
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// responder builds one request's response in its API's shape: SSE events
// while streaming, or the whole JSON body.
type responder struct {
	kind         apiKind
	model        string
	id           string
	created      int64
	promptTokens int
	includeUsage bool
	started      bool
}

func newResponder(kind apiKind, req *parsedRequest, id uint64, promptTokens int) *responder {
	o := &responder{kind: kind, model: req.model, created: Epoch.Unix() + int64(id),
		promptTokens: promptTokens, includeUsage: req.includeUsage}
	switch kind {
	case apiAnthropic:
		o.id = fmt.Sprintf("msg_sim%016x", id)
	case apiChat:
		o.id = fmt.Sprintf("chatcmpl-sim%016x", id)
	default:
		o.id = fmt.Sprintf("cmpl-sim%016x", id)
	}
	return o
}

func (o *responder) anthropicUsage(cached, output int) map[string]any {
	return map[string]any{
		// Anthropic counts input_tokens without the cache reads
		"input_tokens":                o.promptTokens - cached,
		"cache_creation_input_tokens": 0,
		"cache_read_input_tokens":     cached,
		"output_tokens":               output,
	}
}

func (o *responder) openAIUsage(cached, output int) map[string]any {
	return map[string]any{
		"prompt_tokens":         o.promptTokens,
		"completion_tokens":     output,
		"total_tokens":          o.promptTokens + output,
		"prompt_tokens_details": map[string]any{"cached_tokens": cached},
	}
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
func (o *responder) start(buf []byte, cached int) []byte {
	if o.started {
		return buf
	}
	o.started = true
	switch o.kind {
	case apiAnthropic:
		buf = appendEvent(buf, "message_start", map[string]any{"type": "message_start", "message": map[string]any{
			"id": o.id, "type": "message", "role": "assistant", "model": o.model, "content": []any{},
			"stop_reason": nil, "stop_sequence": nil, "usage": o.anthropicUsage(cached, 0),
		}})
		buf = appendEvent(buf, "content_block_start", map[string]any{"type": "content_block_start", "index": 0,
			"content_block": map[string]any{"type": "text", "text": ""}})
	case apiChat:
		buf = append(buf, `data: {"id":"`...)
		buf = append(buf, o.id...)
		buf = append(buf, `","object":"chat.completion.chunk","created":`...)
		buf = strconv.AppendInt(buf, o.created, 10)
		buf = append(buf, `,"model":`...)
		buf = appendJSONString(buf, o.model)
		buf = append(buf, `,"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`+"\n\n"...)
	}
	return buf
}

// delta writes one token's event.
func (o *responder) delta(buf []byte, text string, cached int) []byte {
	buf = o.start(buf, cached)
	switch o.kind {
	case apiAnthropic:
		buf = append(buf, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":"...)
		buf = appendJSONString(buf, text)
		return append(buf, "}}\n\n"...)
	case apiChat:
		buf = o.openAIChunkHead(buf, "chat.completion.chunk")
		buf = append(buf, `"choices":[{"index":0,"delta":{"content":`...)
		buf = appendJSONString(buf, text)
		return append(buf, `},"logprobs":null,"finish_reason":null}]}`+"\n\n"...)
	default:
		buf = o.openAIChunkHead(buf, "text_completion")
		buf = append(buf, `"choices":[{"index":0,"text":`...)
		buf = appendJSONString(buf, text)
		return append(buf, `,"logprobs":null,"finish_reason":null}]}`+"\n\n"...)
	}
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

// anthropicStop maps the engine's finish reason to Anthropic's stop_reason.
func anthropicStop(res Result) (reason string, seq any) {
	switch res.FinishReason {
	case "stop":
		if res.StopSequence != "" {
			return "stop_sequence", res.StopSequence
		}
		return "end_turn", nil
	default:
		return "max_tokens", nil
	}
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
	buf = o.start(buf, cached)
	switch o.kind {
	case apiAnthropic:
		reason, seq := anthropicStop(res)
		buf = appendEvent(buf, "content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
		buf = appendEvent(buf, "message_delta", map[string]any{"type": "message_delta",
			"delta": map[string]any{"stop_reason": reason, "stop_sequence": seq},
			"usage": o.anthropicUsage(res.CachedTokens, res.OutputTokens)})
		return appendEvent(buf, "message_stop", map[string]any{"type": "message_stop"})
	default:
		object, choice := "chat.completion.chunk", map[string]any{"index": 0, "delta": map[string]any{},
			"logprobs": nil, "finish_reason": res.FinishReason}
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

// whole is the non-streaming response body.
func (o *responder) whole(res Result) []byte {
	var v any
	switch o.kind {
	case apiAnthropic:
		reason, seq := anthropicStop(res)
		v = map[string]any{"id": o.id, "type": "message", "role": "assistant", "model": o.model,
			"content":     []any{map[string]any{"type": "text", "text": res.OutputText}},
			"stop_reason": reason, "stop_sequence": seq,
			"usage": o.anthropicUsage(res.CachedTokens, res.OutputTokens)}
	case apiChat:
		v = map[string]any{"id": o.id, "object": "chat.completion", "created": o.created, "model": o.model,
			"choices": []any{map[string]any{"index": 0, "logprobs": nil, "finish_reason": res.FinishReason,
				"message": map[string]any{"role": "assistant", "content": res.OutputText}}},
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
