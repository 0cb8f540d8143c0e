package sim

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"regexp/syntax"
	"slices"
	"strconv"
	"strings"
)

// The arguments of a simulated tool call are generated from the tool's JSON
// Schema so that a client validating them (Claude Code checks every tool
// input) accepts them: required properties are always present, optional ones
// sometimes; strings respect length, pattern and common formats; numbers
// their bounds and multipleOf; arrays their item counts; enum, const, $ref,
// anyOf/oneOf/allOf and nested objects are followed. Values are small and
// inert (words of the simulated vocabulary, small numbers), and everything
// is drawn from the reply's seed.

// draws is a deterministic stream of pseudo-random numbers.
type draws struct{ seed, n uint64 }

func (d *draws) next() uint64 {
	d.n++
	return mix64(d.seed ^ d.n*0x9e3779b97f4a7c15)
}

// intn is a number in [0, n) (n >= 1).
func (d *draws) intn(n int) int { return int(d.next() % uint64(n)) }

// chance is true with probability p.
func (d *draws) chance(p float64) bool { return float64(d.next()>>11)/(1<<53) < p }

// maxSchemaDepth bounds recursion through nested (or self-referencing) schemas.
const maxSchemaDepth = 8

// schemaValues generates values for the schemas of one root schema (whose
// $defs/definitions a $ref may point into).
type schemaValues struct {
	root map[string]any
	d    *draws
}

// generateArgs returns arguments valid against schema (a JSON Schema decoded
// with UseNumber), as a JSON object value.
func generateArgs(schema map[string]any, seed uint64) any {
	g := &schemaValues{root: schema, d: &draws{seed: seed}}
	v := g.value(schema, 0)
	if _, ok := v.(map[string]any); !ok {
		// tool inputs are objects whatever the schema says
		return map[string]any{}
	}
	return v
}

func (g *schemaValues) value(s map[string]any, depth int) any {
	if s == nil {
		return g.words(1, 3)
	}
	if ref, ok := s["$ref"].(string); ok && depth < maxSchemaDepth {
		if target := g.resolve(ref); target != nil {
			return g.value(target, depth+1)
		}
	}
	if c, ok := s["const"]; ok {
		return c
	}
	if e, ok := s["enum"].([]any); ok && len(e) > 0 {
		return e[g.d.intn(len(e))]
	}
	for _, key := range []string{"anyOf", "oneOf"} {
		if alts, ok := s[key].([]any); ok && len(alts) > 0 {
			return g.value(g.pickBranch(alts), depth+1)
		}
	}
	if all, ok := s["allOf"].([]any); ok && len(all) > 0 {
		return g.value(g.merge(s, all, depth), depth+1)
	}
	switch schemaType(s) {
	case "null":
		return nil
	case "boolean":
		return g.d.chance(0.5)
	case "integer":
		return g.number(s, true)
	case "number":
		return g.number(s, false)
	case "array":
		return g.array(s, depth)
	case "object":
		return g.object(s, depth)
	default:
		return g.str(s)
	}
}

// schemaType is the schema's type, the first non-null one of a list, or what
// its keywords imply.
func schemaType(s map[string]any) string {
	switch t := s["type"].(type) {
	case string:
		return t
	case []any:
		for _, x := range t {
			if name, ok := x.(string); ok && name != "null" {
				return name
			}
		}
		return "null"
	}
	switch {
	case s["properties"] != nil || s["required"] != nil || s["additionalProperties"] != nil:
		return "object"
	case s["items"] != nil || s["prefixItems"] != nil:
		return "array"
	case s["minimum"] != nil || s["maximum"] != nil || s["multipleOf"] != nil:
		return "number"
	}
	return "string"
}

// resolve follows a local reference (#/$defs/x, #/definitions/x, #).
func (g *schemaValues) resolve(ref string) map[string]any {
	if ref == "#" {
		return g.root
	}
	if !strings.HasPrefix(ref, "#/") {
		return nil
	}
	var cur any = g.root
	for _, part := range strings.Split(ref[2:], "/") {
		part = strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[part]
	}
	m, _ := cur.(map[string]any)
	return m
}

// pickBranch prefers a branch that is not just null, so the value says
// something.
func (g *schemaValues) pickBranch(alts []any) map[string]any {
	var first map[string]any
	for _, a := range alts {
		m, ok := a.(map[string]any)
		if !ok {
			continue
		}
		if first == nil {
			first = m
		}
		if schemaType(m) != "null" || m["$ref"] != nil {
			return m
		}
	}
	return first
}

// merge folds allOf branches (and the schema's own keywords) into one
// schema: properties and required are united, other keywords the last wins.
func (g *schemaValues) merge(s map[string]any, all []any, depth int) map[string]any {
	out := map[string]any{}
	props := map[string]any{}
	var required []any
	add := func(m map[string]any) {
		for k, v := range m {
			switch k {
			case "allOf":
			case "properties":
				if p, ok := v.(map[string]any); ok {
					for name, ps := range p {
						props[name] = ps
					}
				}
			case "required":
				if r, ok := v.([]any); ok {
					required = append(required, r...)
				}
			default:
				out[k] = v
			}
		}
	}
	add(s)
	for _, a := range all {
		if m, ok := a.(map[string]any); ok {
			if ref, ok := m["$ref"].(string); ok && depth < maxSchemaDepth {
				if t := g.resolve(ref); t != nil {
					m = t
				}
			}
			add(m)
		}
	}
	if len(props) > 0 {
		out["properties"] = props
	}
	if len(required) > 0 {
		out["required"] = required
	}
	return out
}

func (g *schemaValues) object(s map[string]any, depth int) any {
	out := map[string]any{}
	if depth >= maxSchemaDepth {
		return out
	}
	props, _ := s["properties"].(map[string]any)
	required := map[string]bool{}
	if r, ok := s["required"].([]any); ok {
		for _, x := range r {
			if name, ok := x.(string); ok {
				required[name] = true
			}
		}
	}
	// required first, in a stable order; then some optional ones
	for _, name := range sortedKeys(required) {
		ps, _ := props[name].(map[string]any)
		out[name] = g.value(ps, depth+1)
	}
	minProps := intKeyword(s, "minProperties", 0)
	for _, name := range sortedKeys(props) {
		if _, done := out[name]; done {
			continue
		}
		if len(out) < minProps || g.d.chance(0.25) {
			ps, _ := props[name].(map[string]any)
			out[name] = g.value(ps, depth+1)
		}
	}
	for i := 0; len(out) < minProps; i++ { // extra names only where allowed
		if ap, ok := s["additionalProperties"].(bool); ok && !ap {
			break
		}
		out[fmt.Sprintf("field%d", i)] = g.words(1, 2)
	}
	return out
}

func (g *schemaValues) array(s map[string]any, depth int) any {
	lo := intKeyword(s, "minItems", 0)
	hi := intKeyword(s, "maxItems", -1)
	n := max(lo, 1+g.d.intn(3))
	if hi >= 0 {
		n = min(n, hi)
	}
	if depth >= maxSchemaDepth {
		n = lo
	}
	var tuple []any // prefixItems (2020-12) or an items list (draft 4)
	items, _ := s["items"].(map[string]any)
	if p, ok := s["prefixItems"].([]any); ok {
		tuple = p
	} else if p, ok := s["items"].([]any); ok {
		tuple = p
	}
	out := make([]any, 0, n)
	seen := map[string]bool{}
	for i := 0; len(out) < n && i < 4*n+8; i++ {
		var is map[string]any
		if len(out) < len(tuple) {
			is, _ = tuple[len(out)].(map[string]any)
		} else {
			is = items
		}
		v := g.value(is, depth+1)
		if s["uniqueItems"] == true {
			key, _ := json.Marshal(v)
			if seen[string(key)] {
				continue
			}
			seen[string(key)] = true
		}
		out = append(out, v)
	}
	return out
}

// number draws a small whole number inside the schema's bounds (what a
// model writes, and what prints the same in every language; a client may
// well want a "number" to be whole), a fraction only where the bounds leave
// no whole number.
func (g *schemaValues) number(s map[string]any, integer bool) any {
	lo, hasLo := floatKeyword(s, "minimum")
	hi, hasHi := floatKeyword(s, "maximum")
	// exclusive bounds: numbers since draft 6, booleans in draft 4
	if x, ok := floatKeyword(s, "exclusiveMinimum"); ok {
		lo, hasLo = math.Floor(x)+1, true
	} else if s["exclusiveMinimum"] == true && hasLo {
		lo = math.Floor(lo) + 1
	}
	if x, ok := floatKeyword(s, "exclusiveMaximum"); ok {
		hi, hasHi = math.Ceil(x)-1, true
	} else if s["exclusiveMaximum"] == true && hasHi {
		hi = math.Ceil(hi) - 1
	}
	if !integer && hasLo && hasHi && math.Ceil(lo) > math.Floor(hi) && lo <= hi {
		return jsonNumber((lo + hi) / 2)
	}
	lo, hi = math.Ceil(lo), math.Floor(hi)
	switch {
	case !hasLo && !hasHi:
		lo, hi = 0, 100
	case !hasLo:
		lo = hi - 100
	case !hasHi:
		hi = lo + 100
	}
	hi = min(hi, lo+100) // small numbers, even when the bound is 2^53
	if hi < lo {
		hi = lo
	}
	v := lo + float64(g.d.intn(int(hi-lo)+1))
	if m, ok := floatKeyword(s, "multipleOf"); ok && m > 0 {
		k := math.Ceil(lo / m)
		v = (k + float64(g.d.intn(4))) * m
		if hasHi && v > hi {
			v = k * m
		}
		return jsonNumber(v)
	}
	return jsonNumber(v)
}

func jsonNumber(v float64) json.Number {
	return json.Number(strconv.FormatFloat(v, 'f', -1, 64))
}

func (g *schemaValues) str(s map[string]any) any {
	lo := intKeyword(s, "minLength", 0)
	hi := intKeyword(s, "maxLength", -1)
	var v string
	if p, ok := s["pattern"].(string); ok {
		v = g.matching(p)
	} else {
		switch s["format"] {
		case "date-time":
			v = "2026-01-02T03:04:05Z"
		case "date":
			v = "2026-01-02"
		case "time":
			v = "03:04:05Z"
		case "email":
			v = "sim@example.com"
		case "uri", "url", "uri-reference", "iri":
			v = "https://example.com/sim"
		case "uuid":
			v = fmt.Sprintf("%08x-%04x-4%03x-8%03x-%012x", uint32(g.d.next()), uint16(g.d.next()),
				g.d.next()&0xfff, g.d.next()&0xfff, g.d.next()&0xffffffffffff)
		case "ipv4":
			v = "127.0.0.1"
		case "ipv6":
			v = "::1"
		case "hostname":
			v = "localhost"
		default:
			v = g.words(1, 4)
		}
	}
	if hi >= 0 && len(v) > hi {
		v = v[:hi]
	}
	for len(v) < lo {
		v += "a"
	}
	return v
}

// words joins between lo and hi words of the simulated vocabulary.
func (g *schemaValues) words(lo, hi int) string {
	n := lo + g.d.intn(hi-lo+1)
	parts := make([]string, n)
	for i := range parts {
		parts[i] = strings.TrimSpace(outputWords[g.d.intn(len(outputWords))])
	}
	return strings.Join(parts, " ")
}

// matching returns a string the pattern matches (found anywhere, as JSON
// Schema's pattern means), or plain words when the pattern uses what Go's
// regexp cannot parse (lookarounds, backreferences).
func (g *schemaValues) matching(pattern string) string {
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return g.words(1, 2)
	}
	var b strings.Builder
	g.emitRegexp(&b, re.Simplify(), 0)
	out := b.String()
	if ok, _ := regexp.MatchString(pattern, out); !ok {
		return g.words(1, 2)
	}
	return out
}

func (g *schemaValues) emitRegexp(b *strings.Builder, re *syntax.Regexp, depth int) {
	if depth > 32 {
		return
	}
	repeat := func(lo, hi int) {
		if hi < 0 {
			hi = lo + 2
		}
		n := lo + g.d.intn(hi-lo+1)
		for range n {
			g.emitRegexp(b, re.Sub[0], depth+1)
		}
	}
	switch re.Op {
	case syntax.OpLiteral:
		b.WriteString(string(re.Rune))
	case syntax.OpCharClass:
		b.WriteRune(g.classRune(re.Rune))
	case syntax.OpAnyCharNotNL, syntax.OpAnyChar:
		b.WriteByte('a')
	case syntax.OpCapture:
		g.emitRegexp(b, re.Sub[0], depth+1)
	case syntax.OpStar:
		repeat(0, 2)
	case syntax.OpPlus:
		repeat(1, 3)
	case syntax.OpQuest:
		repeat(0, 1)
	case syntax.OpRepeat:
		repeat(re.Min, re.Max)
	case syntax.OpConcat:
		for _, sub := range re.Sub {
			g.emitRegexp(b, sub, depth+1)
		}
	case syntax.OpAlternate:
		g.emitRegexp(b, re.Sub[g.d.intn(len(re.Sub))], depth+1)
	}
	// anchors, word boundaries and empty matches emit nothing
}

// classRune picks a rune of a character class (pairs of range ends),
// preferring printable ASCII.
func (g *schemaValues) classRune(ranges []rune) rune {
	var ascii [][2]rune
	for i := 0; i+1 < len(ranges); i += 2 {
		lo, hi := max(ranges[i], 0x21), min(ranges[i+1], 0x7e)
		if lo <= hi {
			ascii = append(ascii, [2]rune{lo, hi})
		}
	}
	if len(ascii) > 0 {
		r := ascii[g.d.intn(len(ascii))]
		return r[0] + rune(g.d.intn(int(r[1]-r[0])+1))
	}
	if len(ranges) >= 2 {
		return ranges[0]
	}
	return 'a'
}

func floatKeyword(s map[string]any, key string) (float64, bool) {
	switch v := s[key].(type) {
	case json.Number:
		f, err := v.Float64()
		return f, err == nil
	case float64:
		return v, true
	}
	return 0, false
}

func intKeyword(s map[string]any, key string, def int) int {
	if f, ok := floatKeyword(s, key); ok && f >= 0 {
		return int(min(f, 1<<20))
	}
	return def
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
