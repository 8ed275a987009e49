package worker

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// decoder fills a struct from a YAML node strictly: an unknown field, a
// duplicate key or a value of the wrong type is an Error with its line. It
// records the line of every field it sets, so that validation can point at it.
type decoder struct {
	file   string
	lines  map[string]int    // field path -> line of its key
	broken bool              // the file could not be read as YAML at all
	env    map[string]string // field path -> the environment variable that set it
	empty  map[string]bool   // field paths written with an empty value (null): they keep their defaults

	errs    Errors // see errorf
	more    *Error // counts the errors past maxErrors; last in errs
	omitted int

	values  int        // visited; see visit
	tooMany *Error     // set once values pass maxValues
	alias   *yaml.Node // the outermost alias decode is in, and its path
	aliasAt string

	fields map[reflect.Type]*structFields // by struct, built once: a table has many jobs
}

// maxValues bounds the values (and unknown keys) decode visits. Each takes
// at least 2 bytes of YAML, so a file within maxFileSize holds fewer, unless
// aliases repeat a large value many times over (the "billion laughs"): 140 kB
// of them can expand to 100 million unknown fields.
const maxValues = maxFileSize

// visit counts n, at path, and reports whether decode may go on. Past
// maxValues it records an error on the alias that went past.
func (d *decoder) visit(n *yaml.Node, path string) bool {
	if d.values++; d.values <= maxValues {
		return true
	}
	if d.alias != nil {
		n, path = d.alias, d.aliasAt
	}
	if d.tooMany == nil {
		d.tooMany = &Error{File: d.file, Line: n.Line, Path: orRoot(path),
			Msg: fmt.Sprintf("aliases expand the file to more than %d values; it is read no further", maxValues)}
	}
	return false
}

// structFields are the YAML names of a struct's fields.
type structFields struct {
	index map[string]int // name -> field index
	names string         // every name, in order, for messages
}

func (d *decoder) fieldsOf(t reflect.Type) *structFields {
	if sf, ok := d.fields[t]; ok {
		return sf
	}
	sf := &structFields{index: map[string]int{}}
	var names []string
	for i := range t.NumField() {
		tag, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",") // the name, without ",omitempty"
		if tag == "" || tag == "-" {
			continue
		}
		sf.index[tag] = i
		names = append(names, tag)
	}
	sf.names = strings.Join(names, ", ")
	if d.fields == nil {
		d.fields = map[reflect.Type]*structFields{}
	}
	d.fields[t] = sf
	return sf
}

var durationType = reflect.TypeFor[time.Duration]()

func (d *decoder) decode(n *yaml.Node, path string, v reflect.Value) {
	if !d.visit(n, path) {
		return
	}
	if n.Kind == yaml.AliasNode && d.alias == nil {
		d.alias, d.aliasAt = n, path
		defer func() { d.alias = nil }()
	}
	for n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		if d.empty == nil {
			d.empty = map[string]bool{}
		}
		d.empty[path] = true
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
	fields := d.fieldsOf(v.Type())
	seen := make([]bool, v.NumField())
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, val := n.Content[i], n.Content[i+1]
		p := join(path, key.Value)
		idx, ok := fields.index[key.Value]
		switch {
		case !ok && key.Kind != yaml.ScalarNode:
			if !d.visit(key, path) {
				return
			}
			d.errorf(key.Line, orRoot(path), "want a field name, found a %s", kind(key))
			continue
		case !ok:
			p = join(path, fieldName(key.Value))
			if !d.visit(key, p) {
				return
			}
			d.errorf(key.Line, p, "unknown field; %s has %s", orRoot(path), fields.names)
			continue
		case seen[idx]:
			d.errorf(key.Line, p, "set twice (first on line %d)", d.lines[p])
			continue
		}
		seen[idx] = true
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
	case yaml.AliasNode:
		return "alias"
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

// fieldName returns an unknown field's name as a path shows it: quoted
// unless it is made of letters, digits, '_' and '-', so that a path stays one
// line and can be read back ("a.b" is not a field of a).
func fieldName(name string) string {
	if name == "" || strings.IndexFunc(name, func(r rune) bool {
		return !(r == '_' || r == '-' || r < utf8.RuneSelf && (unicode.IsLetter(r) || unicode.IsDigit(r)))
	}) >= 0 {
		return strconv.Quote(name)
	}
	return name
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
