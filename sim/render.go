package sim

import (
	"bytes"
	"encoding/json"
	"strings"
)

// FlattenContent turns a message's content, as clients send it, into the text
// a chat template would render: a JSON string as is; a list of blocks as the
// text of its text blocks, a tool_use block as the tool-call markup the
// simulated model generates (toolCallText: name and canonical arguments,
// not the id), and the compact JSON of any other block (tool_result,
// images), joined by newlines. A string and a list holding one text block
// with the same text render the same. null or absent is "".
func FlattenContent(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", err
		}
		return s, nil
	}
	var blocks []json.RawMessage
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return "", err
	}
	var b strings.Builder
	for i, blk := range blocks {
		if i > 0 {
			b.WriteByte('\n')
		}
		var head struct {
			Type  string          `json:"type"`
			Text  *string         `json:"text"`
			Name  string          `json:"name"`
			Input json.RawMessage `json:"input"`
		}
		if err := json.Unmarshal(blk, &head); err != nil {
			// not an object: render its JSON, as a template would stringify it
			head.Type = ""
		}
		if (head.Type == "text" || head.Type == "input_text") && head.Text != nil {
			b.WriteString(*head.Text)
			continue
		}
		if head.Type == "tool_use" && head.Name != "" {
			call, err := renderToolCall(head.Name, head.Input)
			if err != nil {
				return "", err
			}
			b.WriteString(call)
			continue
		}
		var c bytes.Buffer
		if err := json.Compact(&c, blk); err != nil {
			return "", err
		}
		b.Write(c.Bytes())
	}
	return b.String(), nil
}
