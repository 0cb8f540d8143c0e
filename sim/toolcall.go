package sim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// offeredTool is a tool a request offers: its name and its input's JSON
// Schema (decoded with UseNumber, so bounds keep their exact value).
type offeredTool struct {
	name   string
	schema map[string]any
	// reserved: the description tells the model never to call it (Claude
	// Code's DeferredToolPlaceholder: "never call this tool"), so the
	// simulated model does not, unless it is the named tool_choice.
	reserved bool
}

// reservedTool says whether a tool's description forbids calling it.
func reservedTool(description string) bool {
	d := strings.ToLower(description)
	return strings.Contains(d, "never call this tool") || strings.Contains(d, "do not call this tool")
}

// toolChoice is what the request allows: any reply (auto), no tool call
// (none), some tool call (any; OpenAI "required"), or one named tool.
type toolChoice struct {
	mode string // "auto", "none", "any" or "tool"
	name string // for "tool"
}

// parseTools reads Anthropic tools ({name, input_schema}) or OpenAI tools
// ({type: function, function: {name, parameters}}). Anthropic server tools
// (a type such as web_search_20250305 and no input schema) are not callable
// by the model's own output and are left out.
func parseTools(raw json.RawMessage) ([]offeredTool, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, badRequest("tools: want a list: %v", err)
	}
	var out []offeredTool
	for i, t := range list {
		var def struct {
			Type        string          `json:"type"`
			Name        string          `json:"name"`
			Description string          `json:"description"`
			InputSchema json.RawMessage `json:"input_schema"`
			Function    *struct {
				Name        string          `json:"name"`
				Description string          `json:"description"`
				Parameters  json.RawMessage `json:"parameters"`
			} `json:"function"`
		}
		if err := json.Unmarshal(t, &def); err != nil {
			return nil, badRequest("tools[%d]: %v", i, err)
		}
		name, desc, schema := def.Name, def.Description, def.InputSchema
		if def.Function != nil {
			name, desc, schema = def.Function.Name, def.Function.Description, def.Function.Parameters
		}
		if name == "" {
			return nil, badRequest("tools[%d].name: field required", i)
		}
		if def.Function == nil && len(schema) == 0 && def.Type != "" && def.Type != "custom" {
			continue // a server tool
		}
		s := map[string]any{}
		if len(bytes.TrimSpace(schema)) > 0 && string(bytes.TrimSpace(schema)) != "null" {
			d := json.NewDecoder(bytes.NewReader(schema))
			d.UseNumber()
			if err := d.Decode(&s); err != nil {
				return nil, badRequest("tools[%d] (%s): the input schema is not a JSON object: %v", i, name, err)
			}
		}
		out = append(out, offeredTool{name: name, schema: s, reserved: reservedTool(desc)})
	}
	return out, nil
}

// parseToolChoice reads Anthropic's {type: auto|any|tool|none, name} or
// OpenAI's "auto"|"none"|"required" or {type: function, function: {name}}.
func parseToolChoice(raw json.RawMessage) (toolChoice, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return toolChoice{mode: "auto"}, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		switch s {
		case "auto", "none":
			return toolChoice{mode: s}, nil
		case "required":
			return toolChoice{mode: "any"}, nil
		}
		return toolChoice{}, badRequest("tool_choice: %q (want auto, none or required)", s)
	}
	var c struct {
		Type     string `json:"type"`
		Name     string `json:"name"`
		Function *struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return toolChoice{}, badRequest("tool_choice: %v", err)
	}
	switch {
	case c.Type == "function" && c.Function != nil && c.Function.Name != "":
		return toolChoice{mode: "tool", name: c.Function.Name}, nil
	case c.Type == "tool" && c.Name != "":
		return toolChoice{mode: "tool", name: c.Name}, nil
	case c.Type == "auto" || c.Type == "any" || c.Type == "none":
		return toolChoice{mode: c.Type}, nil
	}
	return toolChoice{}, badRequest("tool_choice: unknown choice %s", raw)
}

// canonicalJSON re-encodes a JSON value compactly with object keys sorted
// and numbers as written, so a tool call's arguments render the same
// whichever client re-serialized them.
func canonicalJSON(raw []byte) (string, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return "", err
	}
	return encodeCanonical(v)
}

func encodeCanonical(v any) (string, error) {
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	if err := e.Encode(v); err != nil {
		return "", err
	}
	return strings.TrimSuffix(b.String(), "\n"), nil
}

// Tool calls render as the chat template of a tool-calling model writes them
// (Qwen's markers): the name and the canonical arguments, never the call's
// id. The model generates exactly this text, so the next turn's prompt,
// which renders the same call from the client's history, starts with the
// generated tokens: the reply stays a cacheable prefix.
const (
	toolCallOpen  = `<tool_call>{"name":`
	toolCallArgs  = `,"arguments":`
	toolCallClose = `}</tool_call>`
)

// toolCallText renders one call with canonical arguments.
func toolCallText(name, args string) string {
	n, _ := encodeCanonical(name)
	return toolCallOpen + n + toolCallArgs + args + toolCallClose
}

// renderToolCall renders a call from a client's history: an Anthropic
// tool_use block's input object or an OpenAI call's arguments string.
func renderToolCall(name string, args []byte) (string, error) {
	if len(bytes.TrimSpace(args)) == 0 {
		args = []byte("{}")
	}
	c, err := canonicalJSON(args)
	if err != nil {
		return "", fmt.Errorf("tool call %q: arguments are not JSON: %v", name, err)
	}
	return toolCallText(name, c), nil
}
