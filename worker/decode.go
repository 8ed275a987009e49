package worker

import (
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Error is one problem of a config file, at a line, on a field path such as
// jobs[1].schedule.
type Error struct {
	File string
	Line int
	Path string
	Msg  string
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s:%d: %s: %s", e.File, e.Line, e.Path, e.Msg)
}

// Errors is every problem of a config file, in file order.
type Errors []*Error

func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// decoder fills a struct from a YAML node strictly: an unknown field, a
// duplicate key or a value of the wrong type is an Error with its line. It
// records the line of every field it sets, so that validation can point at it.
type decoder struct {
	file   string
	lines  map[string]int // field path -> line of its key
	errs   Errors
	broken bool // the file could not be read as YAML at all
}

func (d *decoder) errorf(line int, path, format string, args ...any) {
	d.errs = append(d.errs, &Error{File: d.file, Line: line, Path: path, Msg: fmt.Sprintf(format, args...)})
}

var durationType = reflect.TypeFor[time.Duration]()

func (d *decoder) decode(n *yaml.Node, path string, v reflect.Value) {
	for n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return // an empty value leaves the default
	}
	switch {
	case v.Type() == durationType:
		d.duration(n, path, v)
	case v.Kind() == reflect.Struct:
		d.mapping(n, path, v)
	case v.Kind() == reflect.Slice:
		d.sequence(n, path, v)
	case v.Kind() == reflect.String:
		if n.Kind != yaml.ScalarNode {
			d.errorf(n.Line, path, "want a string, found a %s", kind(n))
			return
		}
		v.SetString(n.Value)
	default:
		d.scalar(n, path, v)
	}
}

func (d *decoder) mapping(n *yaml.Node, path string, v reflect.Value) {
	if n.Kind != yaml.MappingNode {
		d.errorf(n.Line, orRoot(path), "want a mapping of fields, found a %s", kind(n))
		return
	}
	fields := map[string]int{}
	var names []string
	for i := range v.NumField() {
		tag := v.Type().Field(i).Tag.Get("yaml")
		if tag == "" || tag == "-" {
			continue
		}
		fields[tag] = i
		names = append(names, tag)
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, val := n.Content[i], n.Content[i+1]
		p := join(path, key.Value)
		idx, ok := fields[key.Value]
		switch {
		case !ok:
			d.errorf(key.Line, p, "unknown field; %s has %s", orRoot(path), strings.Join(names, ", "))
			continue
		case seen[key.Value]:
			d.errorf(key.Line, p, "set twice (first on line %d)", d.lines[p])
			continue
		}
		seen[key.Value] = true
		d.lines[p] = key.Line
		d.decode(val, p, v.Field(idx))
	}
}

func (d *decoder) sequence(n *yaml.Node, path string, v reflect.Value) {
	if n.Kind != yaml.SequenceNode {
		d.errorf(n.Line, path, "want a list, found a %s", kind(n))
		return
	}
	s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
	for i, item := range n.Content {
		p := path + "[" + strconv.Itoa(i) + "]"
		d.lines[p] = item.Line
		d.decode(item, p, s.Index(i))
	}
	v.Set(s)
}

func (d *decoder) duration(n *yaml.Node, path string, v reflect.Value) {
	if n.Kind != yaml.ScalarNode {
		d.errorf(n.Line, path, "want a duration such as 500ms, 15s or 1h, found a %s", kind(n))
		return
	}
	dur, err := time.ParseDuration(n.Value)
	if err != nil {
		if _, isNum := strconv.ParseFloat(n.Value, 64); isNum == nil {
			d.errorf(n.Line, path, "%s has no unit; write it as 500ms, 15s or 1h", n.Value)
		} else {
			d.errorf(n.Line, path, "%q is not a duration; write it as 500ms, 15s or 1h", n.Value)
		}
		return
	}
	v.SetInt(int64(dur))
}

func (d *decoder) scalar(n *yaml.Node, path string, v reflect.Value) {
	if n.Kind != yaml.ScalarNode {
		d.errorf(n.Line, path, "want a %s, found a %s", v.Kind(), kind(n))
		return
	}
	ptr := reflect.New(v.Type())
	if err := n.Decode(ptr.Interface()); err != nil {
		d.errorf(n.Line, path, "%q is not a %s", n.Value, typeName(v.Type()))
		return
	}
	v.Set(ptr.Elem())
}

func kind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "list"
	case yaml.ScalarNode:
		return fmt.Sprintf("%s (%q)", strings.TrimPrefix(n.Tag, "!!"), n.Value)
	}
	return "document"
}

func typeName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int64:
		return "whole number"
	case reflect.Float64:
		return "number"
	case reflect.Bool:
		return "boolean (true or false)"
	}
	return t.String()
}

func join(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}

func orRoot(path string) string {
	if path == "" {
		return "config"
	}
	return path
}

// lineOf returns the line of path, or of its closest parent that has one.
func (d *decoder) lineOf(path string) int {
	for p := path; p != ""; {
		if l, ok := d.lines[p]; ok {
			return l
		}
		i := max(strings.LastIndexAny(p, ".["), 0)
		p = p[:i]
	}
	return 1
}

// sortErrors puts errors in file order.
func sortErrors(es Errors) {
	slices.SortStableFunc(es, func(a, b *Error) int { return a.Line - b.Line })
}
