package sim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// toolSchemas are input schemas of the shapes agents offer: required and
// optional fields, enums, bounded numbers, patterns, formats, arrays of
// objects, nested objects, $ref into $defs, anyOf with null, allOf, a draft
// 4 exclusive bound, and the empty schema.
var toolSchemas = []string{
	`{"type":"object","properties":{"command":{"type":"string"},"timeout":{"type":"number","maximum":600000},"run_in_background":{"type":"boolean"}},"required":["command"],"additionalProperties":false}`,
	`{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","properties":{"file_path":{"type":"string"},"offset":{"type":"integer","minimum":0,"maximum":9007199254740991},"limit":{"type":"integer","exclusiveMinimum":0,"maximum":9007199254740991}},"required":["file_path","offset","limit"],"additionalProperties":false}`,
	`{"type":"object","properties":{"level":{"type":"string","enum":["low","medium","high"]},"findings":{"type":"array","minItems":2,"maxItems":4,"items":{"type":"object","properties":{"file":{"type":"string"},"line":{"type":"integer","minimum":-10,"maximum":-3},"short":{"type":"string","maxLength":6,"minLength":3},"severity":{"enum":["important","nit"]}},"required":["file","line","short","severity"],"additionalProperties":false}}},"required":["level","findings"]}`,
	`{"type":"object","properties":{"run":{"type":"string","pattern":"^wf_[a-z0-9-]{6,}$"},"ticket":{"type":"string","pattern":"[A-Z]{2,4}-[0-9]+"},"when":{"type":"string","format":"date-time"},"id":{"type":"string","format":"uuid"},"site":{"type":"string","format":"uri"},"mail":{"type":"string","format":"email"}},"required":["run","ticket","when","id","site","mail"]}`,
	`{"type":"object","$defs":{"edit":{"type":"object","properties":{"old":{"type":"string"},"new":{"type":"string"}},"required":["old","new"]}},"properties":{"edits":{"type":"array","items":{"$ref":"#/$defs/edit"},"minItems":1},"dry":{"anyOf":[{"type":"null"},{"type":"boolean"}]}},"required":["edits","dry"]}`,
	`{"type":"object","allOf":[{"properties":{"a":{"type":"integer","multipleOf":5,"minimum":7}},"required":["a"]},{"properties":{"b":{"const":"fixed"}},"required":["b"]}]}`,
	`{"$schema":"http://json-schema.org/draft-04/schema#","type":"object","properties":{"n":{"type":"number","minimum":1,"maximum":2,"exclusiveMaximum":true},"tags":{"type":"array","items":{"type":"string"},"uniqueItems":true,"minItems":3}},"required":["n","tags"]}`,
	`{"type":"object","properties":{"nested":{"type":"object","properties":{"deep":{"type":"object","properties":{"x":{"type":["string","null"],"minLength":2}},"required":["x"]}},"required":["deep"]},"any":{}},"required":["nested","any"],"minProperties":2}`,
	`{"type":"object","properties":{"ratio":{"type":"number","minimum":0.2,"maximum":0.4},"count":{"type":"number","minimum":1.5}},"required":["ratio","count"]}`,
	`{"type":"object","properties":{}}`,
	`{}`,
}

func compileSchema(t *testing.T, i int, src string) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(src))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	url := fmt.Sprintf("mem://tool%d.json", i)
	if err := c.AddResource(url, doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile(url)
	if err != nil {
		t.Fatalf("schema %d: %v", i, err)
	}
	return s
}

func decodeSchema(t *testing.T, src string) map[string]any {
	t.Helper()
	d := json.NewDecoder(strings.NewReader(src))
	d.UseNumber()
	var s map[string]any
	if err := d.Decode(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestToolArgumentsAreValidAgainstTheirSchema(t *testing.T) {
	for i, src := range toolSchemas {
		validator := compileSchema(t, i, src)
		schema := decodeSchema(t, src)
		for seed := range uint64(200) {
			args, err := encodeCanonical(generateArgs(schema, seed))
			if err != nil {
				t.Fatal(err)
			}
			v, err := jsonschema.UnmarshalJSON(strings.NewReader(args))
			if err != nil {
				t.Fatal(err)
			}
			if err := validator.Validate(v); err != nil {
				t.Fatalf("schema %d seed %d: %s is invalid: %v", i, seed, args, err)
			}
		}
	}
}

func TestToolArgumentsAreDeterministicAndVary(t *testing.T) {
	schema := decodeSchema(t, toolSchemas[2])
	a, _ := encodeCanonical(generateArgs(schema, 7))
	b, _ := encodeCanonical(generateArgs(schema, 7))
	if a != b {
		t.Fatalf("same seed, different arguments: %s vs %s", a, b)
	}
	seen := map[string]bool{}
	for seed := range uint64(20) {
		s, _ := encodeCanonical(generateArgs(schema, seed))
		seen[s] = true
	}
	if len(seen) < 10 {
		t.Fatalf("only %d distinct arguments in 20 seeds", len(seen))
	}
}

// TestToolCallRendersTheSameFromEitherAPIAndAnyKeyOrder: the markup the
// model generates must be what the next request's history renders, whatever
// order a client re-serializes the arguments in.
func TestToolCallRendersTheSameFromEitherAPIAndAnyKeyOrder(t *testing.T) {
	generated := toolCallText("Read", `{"file_path":"/a","limit":2,"offset":0.5}`)
	anthropic, err := FlattenContent(json.RawMessage(`[{"type":"tool_use","id":"x","name":"Read","input":{"offset":0.5,"limit":2,"file_path":"/a"}}]`))
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := flattenMessages([]rawMessage{{Role: "assistant", Content: json.RawMessage(`null`),
		ToolCalls: json.RawMessage(`[{"id":"y","type":"function","function":{"name":"Read","arguments":"{\"limit\":2,\"offset\":0.5,\"file_path\":\"/a\"}"}}]`)}})
	if err != nil {
		t.Fatal(err)
	}
	if anthropic != generated || msgs[0].Content != generated {
		t.Fatalf("generated %q, Anthropic history %q, OpenAI history %q", generated, anthropic, msgs[0].Content)
	}
	if !bytes.Contains([]byte(generated), []byte(`"arguments":{"file_path"`)) {
		t.Fatalf("arguments not canonical: %s", generated)
	}
}
