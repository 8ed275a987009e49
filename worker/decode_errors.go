package worker

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
)

// maxErrors is how many errors a file lists: the earliest in the file. One
// more line counts the others, so that a file of a thousand wrong lines
// still fits on a screen, and its errors in memory.
const maxErrors = 50

// Error is one problem of a config file, at a line, on a field path such as
// jobs[1].schedule.
type Error struct {
	File string
	Line int
	Path string
	Msg  string
}

// Error returns the problem on one line: a message that quotes the file
// (a tag, or a schedule by way of the scheduler) has its line breaks escaped.
func (e *Error) Error() string {
	if e.Line == 0 { // not in the file: set by an environment variable, which the message names
		return fmt.Sprintf("%s: %s: %s", e.File, oneLine.Replace(e.Path), oneLine.Replace(e.Msg))
	}
	return fmt.Sprintf("%s:%d: %s: %s", e.File, e.Line, oneLine.Replace(e.Path), oneLine.Replace(e.Msg))
}

var oneLine = strings.NewReplacer("\n", `\n`, "\r", `\r`)

// Errors is every problem of a config file, in file order: at most maxErrors
// of them, then one that counts the rest, e.g.
// "config.yaml:212: config: and 31 more errors from this line on".
type Errors []*Error

func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// errorf records a problem at line. Once maxErrors are listed, it keeps the
// earliest in the file (whatever order the checks find them in) and counts
// the others in d.more, which is last in d.errs and points at the first line
// they are on. It formats only the messages it keeps.
func (d *decoder) errorf(line int, path, format string, args ...any) {
	if len(d.errs) < maxErrors {
		d.errs = append(d.errs, &Error{File: d.file, Line: line, Path: path, Msg: fmt.Sprintf(format, args...)})
		return
	}
	listed := d.errs[:maxErrors]
	if d.more == nil {
		sortErrors(listed)
		d.more = &Error{File: d.file, Line: math.MaxInt, Path: "config"}
		d.errs = append(d.errs, d.more)
	}
	last := listed[maxErrors-1]
	if line >= last.Line {
		d.omit(line)
		return
	}
	d.omit(last.Line)
	// After the errors of the same line: the order the checks found them in.
	i, _ := slices.BinarySearchFunc(listed, line, func(e *Error, line int) int {
		if e.Line <= line {
			return -1
		}
		return 1
	})
	copy(listed[i+1:], listed[i:maxErrors-1])
	listed[i] = &Error{File: d.file, Line: line, Path: path, Msg: fmt.Sprintf(format, args...)}
}

func (d *decoder) omit(line int) {
	d.omitted++
	d.more.Line = min(d.more.Line, line)
}

// summarize writes the count of the errors that are not listed, once every
// check that can add one has run.
func (d *decoder) summarize() {
	if d.more != nil {
		d.more.Msg = fmt.Sprintf("and %d more errors from this line on", d.omitted)
	}
}

// sortErrors puts errors in file order. The count of the unlisted errors is
// on a line after every listed one, and was added after them: it stays last.
func sortErrors(es Errors) {
	slices.SortStableFunc(es, func(a, b *Error) int { return cmp.Compare(a.Line, b.Line) })
}
