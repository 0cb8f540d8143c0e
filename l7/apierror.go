package l7

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/lmwarden/lmwarden/l7/http1"
)

// Errors in the shape of the API the client speaks, so that its SDK
// raises them as what they are (an APIError with the warden's message)
// instead of a JSON parse error or a truncated reply: Anthropic's
// {"type":"error","error":{...}} for /v1/messages, OpenAI's (and vLLM's)
// {"error":{...}} for the other /v1/ paths.

// apiShape is the API a request speaks, from its target.
type apiShape int

const (
	apiNone      apiShape = iota // not an API path: plain text
	apiAnthropic                 // /v1/messages (and /v1/messages/count_tokens)
	apiOpenAI                    // /v1/chat/completions, /v1/completions, ...
)

func shapeOf(h *http1.Head) apiShape {
	if h == nil {
		return apiNone
	}
	path, _, _ := strings.Cut(h.Target, "?")
	switch {
	case strings.HasPrefix(path, "/v1/messages"):
		return apiAnthropic
	case strings.HasPrefix(path, "/v1/"):
		return apiOpenAI
	}
	return apiNone
}

// errorType is the API's error type for a status the shim answers.
func errorType(a apiShape, status int) string {
	if a == apiAnthropic {
		switch {
		case status == 408:
			return "timeout_error"
		case status == 503:
			return "overloaded_error"
		case status >= 500:
			return "api_error"
		}
		return "invalid_request_error"
	}
	if status >= 500 {
		return "server_error"
	}
	return "invalid_request_error"
}

// errorJSON is the API's error object for status with message.
func errorJSON(a apiShape, status int, message string) []byte {
	var v any
	if a == apiAnthropic {
		v = map[string]any{"type": "error", "error": map[string]any{"type": errorType(a, status), "message": message}}
	} else {
		v = map[string]any{"error": map[string]any{"message": message, "type": errorType(a, status), "param": nil, "code": status}}
	}
	b, _ := json.Marshal(v)
	return b
}

// errorEvent is the server-sent event that ends a stream with an error in
// the API's shape: Anthropic's "event: error", OpenAI's data chunk whose
// object is an error (what vLLM itself sends when a stream fails).
func errorEvent(a apiShape, status int, message string) []byte {
	b := make([]byte, 0, 256)
	if a == apiAnthropic {
		b = append(b, "event: error\n"...)
	}
	b = append(b, "data: "...)
	b = append(b, errorJSON(a, status, message)...)
	return append(b, "\n\n"...)
}

// chunk frames b as one chunk of a chunked body.
func chunk(b []byte) []byte {
	out := make([]byte, 0, len(b)+16)
	out = strconv.AppendInt(out, int64(len(b)), 16)
	out = append(out, "\r\n"...)
	out = append(out, b...)
	return append(out, "\r\n"...)
}
