package worker

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// maxFileSize is the largest config file the worker reads: 1 MiB, as much as
// a Kubernetes ConfigMap holds. yaml.v3 builds a node tree of about 25 bytes
// per byte of YAML, so a larger file could cost more memory than the worker
// has before a single line is checked.
const maxFileSize = 1 << 20

// unclosedQuote is yaml.v3's message for a quoted string that runs to the end
// of the input.
const unclosedQuote = "found unexpected end of stream"

// parse reads data as the one YAML document of a config file and returns its
// root. Otherwise it returns the line and the message of the problem: the
// file is too large, is not text, is empty, has a syntax error or holds a
// second document.
func parse(data []byte) (root *yaml.Node, line int, problem string) {
	if len(data) > maxFileSize {
		return nil, 1, "the file is larger than 1 MiB, the most a config may be"
	}
	if line, problem := notText(data); problem != "" {
		return nil, line, "not a YAML text file: " + problem
	}
	doc, extra, err := decodeYAML(data)
	switch {
	case errors.Is(err, io.EOF):
		return nil, 1, "the file is empty"
	case err != nil:
		line, problem := syntaxError(data, err)
		return nil, line, problem
	case extra != nil:
		return nil, extra.Line, "a second YAML document; the file must hold one"
	}
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		return doc.Content[0], 0, ""
	}
	return doc, 0, ""
}

// decodeYAML returns the first document of data, and the second if there is
// one. err is io.EOF if there is none, or the first syntax error.
func decodeYAML(data []byte) (doc, extra *yaml.Node, err error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	doc = new(yaml.Node)
	if err := dec.Decode(doc); err != nil {
		return nil, nil, err
	}
	extra = new(yaml.Node)
	switch err := dec.Decode(extra); {
	case errors.Is(err, io.EOF):
		return doc, nil, nil
	case err != nil:
		return nil, nil, err
	}
	return doc, extra, nil
}

// notText returns the line of the first byte that a YAML file in UTF-8 can't
// hold, a NUL or a byte that is not UTF-8, and what it is. A file that starts
// with a UTF-16 byte-order mark is left to yaml.v3, which reads UTF-16.
func notText(data []byte) (line int, problem string) {
	if utf8.Valid(data) && bytes.IndexByte(data, 0) < 0 ||
		bytes.HasPrefix(data, []byte{0xfe, 0xff}) || bytes.HasPrefix(data, []byte{0xff, 0xfe}) {
		return 0, ""
	}
	for i := 0; i < len(data); {
		r, size := utf8.DecodeRune(data[i:])
		switch {
		case r == 0:
			return lineAt(data, i), "it holds a NUL byte"
		case r == utf8.RuneError && size == 1:
			return lineAt(data, i), fmt.Sprintf("byte %#x is not UTF-8", data[i])
		}
		i += size
	}
	return 0, ""
}

func lineAt(data []byte, offset int) int { return 1 + bytes.Count(data[:offset], []byte("\n")) }

// syntaxError returns the line of err, a syntax error of data, and its
// message. yaml.v3 often names another line: that of the block the error is
// in, one line too early, or none. The parser reads in order, so the first
// k lines of data give the same error once they include the line it is on,
// and before that none, or another one at the end of the input: the line is
// the least such k.
func syntaxError(data []byte, err error) (int, string) {
	ends := lineEnds(data)
	prefix := func(line int) error {
		_, _, err := decodeYAML(data[:ends[line-1]])
		return err
	}
	// first returns the least k <= upTo for which the first k lines give an
	// error that ok accepts; the first upTo lines do. The error is rarely
	// far past the line yaml.v3 names, near: it tries near, near+1, near+3,
	// near+7... then bisects. Each try parses the lines up to it, so an
	// error at the end of a 1 MiB file costs a few parses, not 20.
	first := func(near, upTo int, ok func(error) bool) int {
		lo, hi := 0, upTo // the first lo lines don't give it; the first hi do
		if near = max(near-1, 1); near < upTo {
			if ok(prefix(near)) {
				hi = near
			} else {
				lo = near
				for step := 1; near+step < hi; step *= 2 {
					if ok(prefix(near + step)) {
						hi = near + step
						break
					}
					lo = near + step
				}
			}
		}
		for hi-lo > 1 {
			if mid := (lo + hi) / 2; ok(prefix(mid)) {
				hi = mid
			} else {
				lo = mid
			}
		}
		return hi
	}
	msg := message(err)
	same := func(e error) bool { return e != nil && e.Error() == err.Error() }
	if msg == unclosedQuote {
		// yaml.v3 names the line of the quote, or the last line if the
		// quote is on line 1: compare the message alone.
		same = func(e error) bool { return e != nil && message(e) == msg }
	}
	line := first(yamlLineOf(err), len(ends), same)
	unclosed := func(e error) bool { return e != nil && message(e) == unclosedQuote }
	switch {
	case msg == unclosedQuote:
		return line, "the quoted string that opens on this line is never closed"
	case line > 1:
		// A quoted string that runs from an earlier line to this one: most
		// likely a quote is missing where it opens.
		if open := prefix(line - 1); unclosed(open) {
			return first(yamlLineOf(open), line-1, unclosed),
				fmt.Sprintf("the quoted string that opens on this line runs to line %d, then: %s", line, msg)
		}
	}
	start := 0
	if line > 1 {
		start = ends[line-2]
	}
	text := data[start:ends[line-1]]
	if indent := text[:len(text)-len(bytes.TrimLeft(text, " \t"))]; bytes.IndexByte(indent, '\t') >= 0 && !strings.Contains(msg, "tab") {
		msg += " (indent with spaces, not tabs)"
	}
	return line, msg
}

// lineEnds returns the offset after each line of data.
func lineEnds(data []byte) []int {
	var ends []int
	for i, b := range data {
		if b == '\n' {
			ends = append(ends, i+1)
		}
	}
	if len(data) > 0 && data[len(data)-1] != '\n' {
		ends = append(ends, len(data))
	}
	return ends
}

var yamlLine = regexp.MustCompile(`^(?:yaml: )?(?:line ([0-9]+): )?`)

// message returns a yaml.v3 error without its "yaml: line N: " prefix.
func message(err error) string {
	return yamlLine.ReplaceAllString(err.Error(), "")
}

// yamlLineOf returns the line a yaml.v3 error names, or 1.
func yamlLineOf(err error) int {
	n, _ := strconv.Atoi(yamlLine.FindStringSubmatch(err.Error())[1])
	return max(n, 1)
}
