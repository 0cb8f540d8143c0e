package config

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ErrInvalidConfig wraps every validation error of the configuration.
var ErrInvalidConfig = errors.New("invalid config")

// ConfigError is every problem found in one configuration: decoding
// (wrong types, unknown fields, YAML syntax) and validation alike, each
// naming its field. errors.Is(err, ErrInvalidConfig) holds for it. A
// command that checks a file prints Problems one a line.
type ConfigError struct {
	// File is the file the configuration came from ("": not a file).
	File     string
	Problems []FieldError
}

// FieldError is one problem: the field's path as the file spells it
// (`models[0].spill_threshold`; "" for the file as a whole), the line it
// is on (0: unknown, e.g. a value set by a flag), and what is wrong.
type FieldError struct {
	Path string
	Line int
	Msg  string
}

// String is `line 12: models[0].spill_threshold: want a number or auto,
// got "lots"`.
func (f FieldError) String() string {
	var b strings.Builder
	if f.Line > 0 {
		fmt.Fprintf(&b, "line %d: ", f.Line)
	}
	if f.Path != "" {
		b.WriteString(f.Path)
		b.WriteString(": ")
	}
	b.WriteString(f.Msg)
	return b.String()
}

// Error lists every problem; with one, on one line.
func (e *ConfigError) Error() string {
	prefix := ErrInvalidConfig.Error()
	if e.File != "" {
		prefix = e.File + ": " + prefix
	}
	if len(e.Problems) == 1 {
		return prefix + ": " + e.Problems[0].String()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d problems:", prefix, len(e.Problems))
	for _, p := range e.Problems {
		b.WriteString("\n  ")
		b.WriteString(p.String())
	}
	return b.String()
}

// Unwrap makes errors.Is(err, ErrInvalidConfig) true.
func (e *ConfigError) Unwrap() error { return ErrInvalidConfig }

// problems collects FieldErrors, with the line of each path when the
// decoder saw it.
type problems struct {
	list  []FieldError
	lines map[string]int // path -> line, from decoding (nil: none)
}

func (p *problems) add(path, format string, a ...any) {
	p.list = append(p.list, FieldError{Path: path, Line: p.line(path), Msg: fmt.Sprintf(format, a...)})
}

// line is where path is in the file: its own line, or for a field the file
// left out (a required one), the line of the nearest field around it.
func (p *problems) line(path string) int {
	for path != "" {
		if l, ok := p.lines[path]; ok {
			return l
		}
		path = path[:max(0, strings.LastIndexAny(path, ".["))]
	}
	return 0
}

// has reports whether path, or a field inside it, already has a problem.
func (p *problems) has(path string) bool {
	for _, f := range p.list {
		if f.Path == path || strings.HasPrefix(f.Path, path+".") || strings.HasPrefix(f.Path, path+"[") {
			return true
		}
	}
	return false
}

// err is nil without problems, else a *ConfigError with the problems in
// the order of their lines (those without a line last).
func (p *problems) err(file string) error {
	if len(p.list) == 0 {
		return nil
	}
	list := slices.Clone(p.list)
	slices.SortStableFunc(list, func(a, b FieldError) int {
		if (a.Line == 0) != (b.Line == 0) {
			return cmp.Compare(b.Line, a.Line) // the one with a line first
		}
		return cmp.Compare(a.Line, b.Line)
	})
	return &ConfigError{File: file, Problems: list}
}
