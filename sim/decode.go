package sim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// apiKind says which API a request came through, for its response shapes.
type apiKind int

const (
	apiAnthropic   apiKind = iota // POST /v1/messages
	apiChat                       // POST /v1/chat/completions
	apiCompletions                // POST /v1/completions
)

// parsedRequest is a decoded request body, whatever API it came through.
type parsedRequest struct {
	kind         apiKind
	model        string
	system       string    // Anthropic top-level system, flattened
	msgs         []Message // chat messages, flattened
	prompt       string    // completions prompt
	maxTokens    int       // 0: none given (OpenAI), the rest of the context
	minTokens    int       // vLLM's min_tokens
	ignoreEOS    bool
	stream       bool
	includeUsage bool
	stop         []string
	tools        []offeredTool
	choice       toolChoice
}

// tokens renders the request's prompt.
func (r *parsedRequest) tokens() []uint32 {
	if r.kind == apiCompletions {
		return Tokenize(r.prompt)
	}
	return RenderPrompt(r.system, r.msgs)
}

func badRequest(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errBadRequest, fmt.Sprintf(format, args...))
}

type rawMessage struct {
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	ToolCalls json.RawMessage `json:"tool_calls"`
}

// decodeAnthropic reads a Messages API body.
func decodeAnthropic(body []byte) (*parsedRequest, error) {
	var b struct {
		Model         string          `json:"model"`
		System        json.RawMessage `json:"system"`
		Messages      *[]rawMessage   `json:"messages"`
		MaxTokens     *int            `json:"max_tokens"`
		Stream        bool            `json:"stream"`
		StopSequences []string        `json:"stop_sequences"`
		Tools         json.RawMessage `json:"tools"`
		ToolChoice    json.RawMessage `json:"tool_choice"`
		IgnoreEOS     bool            `json:"ignore_eos"` // vLLM's sampling extension; the sim honours it here too
	}
	if err := strictUnmarshal(body, &b); err != nil {
		return nil, err
	}
	if b.Messages == nil {
		return nil, badRequest("messages: field required")
	}
	if b.MaxTokens == nil {
		return nil, badRequest("max_tokens: field required")
	}
	if *b.MaxTokens < 1 {
		return nil, badRequest("max_tokens: must be at least 1")
	}
	sys, err := FlattenContent(b.System)
	if err != nil {
		return nil, badRequest("system: %v", err)
	}
	msgs, err := flattenMessages(*b.Messages)
	if err != nil {
		return nil, err
	}
	tools, err := renderTools(b.Tools)
	if err != nil {
		return nil, err
	}
	sys = joinSection(sys, tools)
	r := &parsedRequest{kind: apiAnthropic, model: b.Model, system: sys, msgs: msgs,
		maxTokens: *b.MaxTokens, ignoreEOS: b.IgnoreEOS, stream: b.Stream, stop: b.StopSequences}
	if err := r.offer(b.Tools, b.ToolChoice); err != nil {
		return nil, err
	}
	return r, nil
}

// offer reads the tools a request offers and its tool_choice.
func (r *parsedRequest) offer(tools, choice json.RawMessage) error {
	var err error
	if r.tools, err = parseTools(tools); err != nil {
		return err
	}
	if r.choice, err = parseToolChoice(choice); err != nil {
		return err
	}
	if r.choice.mode == "tool" {
		for _, t := range r.tools {
			if t.name == r.choice.name {
				return nil
			}
		}
		return badRequest("tool_choice: tool %q is not among the tools offered", r.choice.name)
	}
	if r.choice.mode == "any" && len(r.tools) == 0 {
		return badRequest("tool_choice: a tool call is required but no tools are offered")
	}
	return nil
}

// decodeChat reads a Chat Completions body.
func decodeChat(body []byte) (*parsedRequest, error) {
	var b struct {
		openAICommon
		Messages   *[]rawMessage   `json:"messages"`
		Tools      json.RawMessage `json:"tools"`
		ToolChoice json.RawMessage `json:"tool_choice"`
	}
	if err := strictUnmarshal(body, &b); err != nil {
		return nil, err
	}
	if b.Messages == nil {
		return nil, badRequest("messages: field required")
	}
	msgs, err := flattenMessages(*b.Messages)
	if err != nil {
		return nil, err
	}
	tools, err := renderTools(b.Tools)
	if err != nil {
		return nil, err
	}
	if tools != "" {
		// a chat template renders tool definitions in the system turn
		if len(msgs) > 0 && msgs[0].Role == "system" {
			msgs[0].Content = joinSection(msgs[0].Content, tools)
		} else {
			msgs = append([]Message{{Role: "system", Content: tools}}, msgs...)
		}
	}
	r := &parsedRequest{kind: apiChat, msgs: msgs}
	if err := b.openAICommon.fill(r); err != nil {
		return nil, err
	}
	if err := r.offer(b.Tools, b.ToolChoice); err != nil {
		return nil, err
	}
	return r, nil
}

// decodeCompletions reads a (legacy) Completions body: prompt is a string
// or a list holding one string.
func decodeCompletions(body []byte) (*parsedRequest, error) {
	var b struct {
		openAICommon
		Prompt json.RawMessage `json:"prompt"`
	}
	if err := strictUnmarshal(body, &b); err != nil {
		return nil, err
	}
	r := &parsedRequest{kind: apiCompletions}
	raw := bytes.TrimSpace(b.Prompt)
	switch {
	case len(raw) == 0 || string(raw) == "null":
		return nil, badRequest("prompt: field required")
	case raw[0] == '"':
		if err := json.Unmarshal(raw, &r.prompt); err != nil {
			return nil, badRequest("prompt: %v", err)
		}
	default:
		var list []string
		if err := json.Unmarshal(raw, &list); err != nil || len(list) != 1 {
			return nil, badRequest("prompt: want a string or a list of one string")
		}
		r.prompt = list[0]
	}
	if err := b.openAICommon.fill(r); err != nil {
		return nil, err
	}
	return r, nil
}

type openAICommon struct {
	Model               string `json:"model"`
	MaxTokens           *int   `json:"max_tokens"`
	MaxCompletionTokens *int   `json:"max_completion_tokens"`
	Stream              bool   `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	Stop      json.RawMessage `json:"stop"`
	IgnoreEOS bool            `json:"ignore_eos"` // vLLM's sampling extensions
	MinTokens int             `json:"min_tokens"`
}

func (c *openAICommon) fill(r *parsedRequest) error {
	r.model, r.stream = c.Model, c.Stream
	r.includeUsage = c.StreamOptions != nil && c.StreamOptions.IncludeUsage
	r.ignoreEOS = c.IgnoreEOS
	if c.MinTokens < 0 {
		return badRequest("min_tokens: must be at least 0")
	}
	r.minTokens = c.MinTokens
	for _, m := range []*int{c.MaxTokens, c.MaxCompletionTokens} {
		if m != nil {
			if *m < 1 {
				return badRequest("max_tokens: must be at least 1")
			}
			r.maxTokens = *m
		}
	}
	stop := bytes.TrimSpace(c.Stop)
	switch {
	case len(stop) == 0 || string(stop) == "null":
	case stop[0] == '"':
		var s string
		if err := json.Unmarshal(stop, &s); err != nil {
			return badRequest("stop: %v", err)
		}
		r.stop = []string{s}
	default:
		if err := json.Unmarshal(stop, &r.stop); err != nil {
			return badRequest("stop: want a string or a list of strings")
		}
	}
	return nil
}

// flattenMessages turns each message's content (and an assistant's
// tool_calls, rendered as the model's tool-call markup) into text.
func flattenMessages(raw []rawMessage) ([]Message, error) {
	msgs := make([]Message, 0, len(raw))
	for i, m := range raw {
		if m.Role == "" {
			return nil, badRequest("messages[%d].role: field required", i)
		}
		text, err := FlattenContent(m.Content)
		if err != nil {
			return nil, badRequest("messages[%d].content: %v", i, err)
		}
		if tc := bytes.TrimSpace(m.ToolCalls); len(tc) > 0 && string(tc) != "null" {
			calls, err := renderOpenAIToolCalls(tc)
			if err != nil {
				return nil, badRequest("messages[%d].tool_calls: %v", i, err)
			}
			if text != "" && calls != "" {
				text += "\n"
			}
			text += calls
		}
		msgs = append(msgs, Message{Role: m.Role, Content: text})
	}
	return msgs, nil
}

// renderOpenAIToolCalls renders an assistant's tool_calls
// ([{id, type, function: {name, arguments}}], arguments a JSON string) one
// call a line.
func renderOpenAIToolCalls(raw json.RawMessage) (string, error) {
	var calls []struct {
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	}
	if err := json.Unmarshal(raw, &calls); err != nil {
		return "", err
	}
	out := make([]string, 0, len(calls))
	for _, c := range calls {
		text, err := renderToolCall(c.Function.Name, []byte(c.Function.Arguments))
		if err != nil {
			return "", err
		}
		out = append(out, text)
	}
	return strings.Join(out, "\n"), nil
}

// renderTools is the compact JSON of a request's tool definitions ("" when
// there are none), which a chat template puts in the system turn.
func renderTools(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" || string(raw) == "[]" {
		return "", nil
	}
	var c bytes.Buffer
	if err := json.Compact(&c, raw); err != nil {
		return "", badRequest("tools: %v", err)
	}
	return c.String(), nil
}

// joinSection appends a section to a system text, separated by a blank line.
func joinSection(text, section string) string {
	switch {
	case section == "":
		return text
	case text == "":
		return section
	}
	return text + "\n\n" + section
}

// strictUnmarshal decodes one JSON object and reports errors as bad requests.
func strictUnmarshal(body []byte, v any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return badRequest("empty body")
	}
	if err := json.Unmarshal(body, v); err != nil {
		return badRequest("invalid JSON: %v", err)
	}
	return nil
}
