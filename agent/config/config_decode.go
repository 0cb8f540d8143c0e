package config

import (
	"reflect"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v4"
)

// The configuration's decoder. It walks the YAML tree beside the Go value,
// which already holds the defaults, so a field the file leaves out keeps
// its default and a new field needs only its `yaml` tag. Every problem is
// collected with the field's path and line, not only the first: a wrong
// type, an unknown field, a mapping where a list belongs.

// defaulter is a type whose zero value is not its default: an element of a
// list (a model) starts from setDefaults before the file's fields apply.
type defaulter interface{ setDefaults() }

var (
	durationType = reflect.TypeFor[time.Duration]()
)

type decoder struct {
	problems
}

// decodeYAML decodes data into v (a pointer to a struct holding the
// defaults) and returns the problems, with every decoded path's line kept
// for later validation errors; syntax says the text is not YAML at all.
func decodeYAML(data []byte, v any) (p *problems, syntax bool) {
	d := &decoder{problems{lines: map[string]int{}}}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		// not YAML: nothing was decoded, so there is nothing else to say
		d.list = append(d.list, FieldError{Msg: strings.TrimPrefix(err.Error(), "yaml: ")})
		return &d.problems, true
	}
	if len(root.Content) == 0 { // an empty file: every field keeps its default
		return &d.problems, false
	}
	d.value(root.Content[0], reflect.ValueOf(v).Elem(), "")
	return &d.problems, false
}

func (d *decoder) fail(n *yaml.Node, path, format string, a ...any) {
	d.lines[path] = n.Line
	d.add(path, format, a...)
}

// value decodes n into v, which is addressable.
func (d *decoder) value(n *yaml.Node, v reflect.Value, path string) {
	for n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	d.lines[path] = n.Line
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return // `field:` with no value: the default stays
	}
	if u, ok := v.Addr().Interface().(yaml.Unmarshaler); ok {
		// called directly, not through n.Decode, whose error would wrap
		// the message in the library's own words and line
		if err := u.UnmarshalYAML(n); err != nil {
			d.fail(n, path, "%v", err)
		}
		return
	}
	switch {
	case v.Type() == durationType:
		d.duration(n, v, path)
	case v.Kind() == reflect.Struct:
		d.mapping(n, v, path)
	case v.Kind() == reflect.Slice:
		d.sequence(n, v, path)
	case v.Kind() == reflect.Pointer && v.Type().Elem().Kind() == reflect.Bool:
		// an optional switch whose default is on (nil: not in the file)
		b := reflect.New(v.Type().Elem())
		if d.scalar(n, b.Elem(), path) {
			v.Set(b)
		}
	default:
		d.scalar(n, v, path)
	}
}

func (d *decoder) mapping(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		d.fail(n, path, "want a mapping of fields, got %s", describe(n))
		return
	}
	fields := yamlFields(v.Type())
	seen := map[string]int{}
	for k := 0; k+1 < len(n.Content); k += 2 {
		key, val := n.Content[k], n.Content[k+1]
		sub := key.Value
		if path != "" {
			sub = path + "." + key.Value
		}
		i, ok := fields[key.Value]
		if !ok {
			d.fail(key, sub, "unknown field (known: %s)", knownFields(v.Type()))
			continue
		}
		if line, dup := seen[key.Value]; dup {
			d.fail(key, sub, "set twice (first on line %d)", line)
			continue
		}
		seen[key.Value] = key.Line
		d.value(val, v.Field(i), sub)
	}
}

func (d *decoder) sequence(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.SequenceNode {
		d.fail(n, path, "want a list, got %s", describe(n))
		return
	}
	s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
	for i, item := range n.Content {
		e := s.Index(i)
		if def, ok := e.Addr().Interface().(defaulter); ok {
			def.setDefaults()
		}
		d.value(item, e, path+"["+strconv.Itoa(i)+"]")
	}
	v.Set(s)
}

func (d *decoder) duration(n *yaml.Node, v reflect.Value, path string) {
	t, err := time.ParseDuration(n.Value)
	if n.Kind != yaml.ScalarNode || err != nil {
		d.fail(n, path, "want a duration such as 30s or 250ms, got %s", describe(n))
		return
	}
	v.SetInt(int64(t))
}

// scalar decodes n into v and reports whether it could.
func (d *decoder) scalar(n *yaml.Node, v reflect.Value, path string) bool {
	want := map[reflect.Kind]string{
		reflect.String: "a string", reflect.Bool: "true or false",
		reflect.Int: "a whole number", reflect.Float64: "a number",
	}[v.Kind()]
	if want == "" {
		d.fail(n, path, "cannot be set from a file") // a field type this decoder does not know
		return false
	}
	if n.Kind != yaml.ScalarNode || (v.Kind() != reflect.String && n.Tag == "!!str") {
		d.fail(n, path, "want %s, got %s", want, describe(n))
		return false
	}
	if err := n.Decode(v.Addr().Interface()); err != nil {
		d.fail(n, path, "want %s, got %s", want, describe(n))
		return false
	}
	return true
}

// describe names what the file has at n, for "want X, got Y".
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	return strconv.Quote(n.Value)
}

// yamlFields maps a struct's `yaml` tag names to field indexes.
func yamlFields(t reflect.Type) map[string]int {
	m := map[string]int{}
	for i := range t.NumField() {
		if name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ","); name != "" && name != "-" {
			m[name] = i
		}
	}
	return m
}

func knownFields(t reflect.Type) string {
	var names []string
	for i := range t.NumField() {
		if name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ","); name != "" && name != "-" {
			names = append(names, name)
		}
	}
	return strings.Join(names, ", ")
}
