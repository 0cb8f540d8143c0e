package sim

import (
	"errors"
	"testing"
)

// seedBodies are realistic and broken bodies for the decoders' fuzzing.
var seedBodies = []string{
	`{"model":"m","max_tokens":256,"stream":true,"system":[{"type":"text","text":"sys","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]},{"role":"assistant","content":[{"type":"text","text":"ok"},{"type":"tool_use","id":"t1","name":"Read","input":{"file_path":"/a"}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"x"}]}],"metadata":{"user_id":"{\"session_id\":\"abc\"}"}}`,
	`{"model":"m","max_tokens":1,"messages":[{"role":"system","content":"s"},{"role":"user","content":"u"}],"stop_sequences":["\n\nHuman:"]}`,
	`{"model":"m","messages":[{"role":"user","content":null}],"stream":true,"stream_options":{"include_usage":true},"stop":"x"}`,
	`{"model":"m","messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]}],"max_completion_tokens":3,"stop":["a","b"]}`,
	`{"model":"m","prompt":["one"],"max_tokens":2}`,
	`{"prompt":"p"}`,
	`{"messages":[`,
	`[]`,
	`null`,
	`{"messages":[{"content":"no role"}]}`,
	`{"max_tokens":-1,"messages":[]}`,
	`{"messages":[{"role":"user","content":[1,2,{"type":"text"}]}],"max_tokens":1e3}`,
}

// fuzzDecoder checks that a decoder never panics and that an accepted body
// renders to a prompt.
func fuzzDecoder(f *testing.F, decode func([]byte) (*parsedRequest, error)) {
	for _, s := range seedBodies {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := decode(body)
		if err != nil {
			if !errors.Is(err, errBadRequest) {
				t.Fatalf("error not marked as a bad request: %v", err)
			}
			return
		}
		// 0 is an OpenAI request without max_tokens: the rest of the context
		if r.maxTokens < 0 || r.maxTokens == 0 && r.kind == apiAnthropic {
			t.Fatalf("accepted max_tokens %d", r.maxTokens)
		}
		_ = r.tokens()
	})
}

func FuzzDecodeAnthropic(f *testing.F)   { fuzzDecoder(f, decodeAnthropic) }
func FuzzDecodeChat(f *testing.F)        { fuzzDecoder(f, decodeChat) }
func FuzzDecodeCompletions(f *testing.F) { fuzzDecoder(f, decodeCompletions) }
