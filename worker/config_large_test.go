package worker

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// unknownJobs returns a cron table of at least size bytes whose jobs are
// registered under no name, and how many jobs it has.
func unknownJobs(size int) ([]byte, int) {
	var b bytes.Buffer
	b.WriteString("jobs:\n")
	n := 0
	for ; b.Len() < size; n++ {
		fmt.Fprintf(&b, "  - name: job%06d\n    schedule: \"@daily\"\n", n)
	}
	return b.Bytes(), n
}

// allocated returns the bytes f allocates on the heap. The package's tests
// run one at a time, so little else allocates meanwhile.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestErrorCap: past maxErrors, the errors earliest in the file are listed
// and one more line counts the rest from where they start, even when a late
// check finds a problem early in the file.
func TestErrorCap(t *testing.T) {
	var b strings.Builder
	b.WriteString("redis:\n  mode: standalone\njobs:\n")
	for i := range 60 {
		fmt.Fprintf(&b, "  - name: job%d\n    schedule: \"@daily\"\n    id: %d\n", i, i)
	}
	// Found in this order: 60 unknown fields (lines 6, 9, ... 183) while
	// reading, the mode (line 2) while validating, 60 unregistered jobs
	// (lines 4, 7, ... 181) last.
	_, err := Load("config.yaml", []byte(b.String()), registered)
	if err == nil {
		t.Fatal("Load accepted 121 problems")
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != maxErrors+1 {
		t.Fatalf("%d lines, want %d:\n%v", len(lines), maxErrors+1, err)
	}
	if want := `config.yaml:2: redis.mode: must be single, sentinel, cluster or embedded, got "standalone"`; lines[0] != want {
		t.Fatalf("first line %q, want %q", lines[0], want)
	}
	// Then both problems of jobs[0] to jobs[23], and the name of jobs[24].
	if want := `config.yaml:76: jobs[24].name: no job "job24" is registered; registered: lottery, report`; lines[maxErrors-1] != want {
		t.Fatalf("last listed %q, want %q", lines[maxErrors-1], want)
	}
	if want := `config.yaml:78: config: and 71 more errors from this line on`; lines[maxErrors] != want {
		t.Fatalf("summary %q, want %q", lines[maxErrors], want)
	}
	for i, l := range lines[1 : maxErrors-1] {
		if !strings.Contains(l, fmt.Sprintf("jobs[%d].", (i)/2)) {
			t.Fatalf("line %d %q is not about jobs[%d]", i+1, l, i/2)
		}
	}
}

// TestLargeConfig: a file of 24,000 unknown jobs (1 MiB) prints one screen
// of errors, and a file past maxFileSize is refused before it is parsed:
// yaml.v3's node tree alone takes about 25 bytes per byte of YAML (262 MB
// for 10 MB).
func TestLargeConfig(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates tens of megabytes")
	}
	data, n := unknownJobs(maxFileSize - 64)
	var err error
	start := time.Now()
	alloc := allocated(func() { _, err = Load("config.yaml", data, registered) })
	t.Logf("%d bytes, %d unknown jobs: %v, %d MB allocated", len(data), n, time.Since(start), alloc>>20)
	lines := strings.Split(fmt.Sprint(err), "\n")
	if len(lines) != maxErrors+1 {
		t.Fatalf("%d lines of errors, want %d", len(lines), maxErrors+1)
	}
	if want := fmt.Sprintf("config.yaml:%d: config: and %d more errors from this line on", 2*maxErrors+2, n-maxErrors); lines[maxErrors] != want {
		t.Fatalf("summary %q, want %q", lines[maxErrors], want)
	}
	// Measured: 45 MB, of which yaml.v3's node tree is 27 MB, reading it
	// into a Config 11 MB and validating 7 MB (70 MB before errors were
	// capped and field names looked up once per struct). The bound leaves
	// room for a change of Go or yaml.v3, not for a second tree.
	if alloc > 64<<20 {
		t.Fatalf("loading %d bytes allocated %d MB, want at most 64 MB", len(data), alloc>>20)
	}

	big, _ := unknownJobs(10 << 20)
	alloc = allocated(func() { _, err = Load("config.yaml", big, registered) })
	if want := "config.yaml:1: config: the file is larger than 1 MiB, the most a config may be"; fmt.Sprint(err) != want {
		t.Fatalf("10 MB file: %v, want %s", err, want)
	}
	if alloc > 1<<20 {
		t.Fatalf("refusing a 10 MB file allocated %d bytes", alloc)
	}
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, big, 0o600); err != nil {
		t.Fatal(err)
	}
	alloc = allocated(func() { _, err = LoadFile(path, registered) })
	if !strings.HasSuffix(fmt.Sprint(err), ": config: the file is larger than 1 MiB, the most a config may be") {
		t.Fatalf("LoadFile of a 10 MB file: %v", err)
	}
	// Reading it whole would take 10 MB; reading 1 MiB in growing buffers
	// takes 2 MB (4 MB with -race).
	if alloc > 8<<20 {
		t.Fatalf("LoadFile of a 10 MB file allocated %d bytes; it should read no more than 1 MiB", alloc)
	}
}

// TestAliasExpansion: aliases that repeat a large mapping many times (the
// "billion laughs") are read only so far; every value they expand to would
// otherwise be decoded, and each unknown key in it counted.
func TestAliasExpansion(t *testing.T) {
	var b strings.Builder
	b.WriteString("lease:\n  ttl: 15s\nx: &a {") // a field read before the expansion stops
	for i := range 10000 {
		fmt.Fprintf(&b, "k%d: 1, ", i)
	}
	b.WriteString("}\njobs: [")
	for range 10000 {
		b.WriteString("*a, ")
	}
	b.WriteString("]\n") // 140 kB that expand to 100 million values
	var err error
	start := time.Now()
	alloc := allocated(func() { _, err = Load("config.yaml", []byte(b.String()), registered) })
	t.Logf("%d bytes: %v, %d MB allocated", b.Len(), time.Since(start), alloc>>20)
	lines := strings.Split(fmt.Sprint(err), "\n")
	if want := "config.yaml:4: jobs[104]: aliases expand the file to more than 1048576 values; it is read no further"; lines[len(lines)-1] != want {
		t.Fatalf("last error %q, want %q", lines[len(lines)-1], want)
	}
	if strings.Contains(fmt.Sprint(err), "lease.ttl") {
		t.Fatalf("an error about a field the file set well:\n%v", err)
	}
	// Measured: 57 MB, mostly the paths of a million unknown fields; 4.6 GB
	// and 16 s before values were bounded.
	if alloc > 128<<20 {
		t.Fatalf("%d MB allocated", alloc>>20)
	}
}

// BenchmarkSyntaxErrorLine: the worst case of the search for a syntax
// error's line in a file of maxFileSize: the error is on the last line and
// yaml.v3 names line 1, so about 30 prefixes are parsed. Measured: 1.5 s and
// 445 MB allocated per load, at most 72 MB resident.
func BenchmarkSyntaxErrorLine(b *testing.B) {
	data, n := unknownJobs(maxFileSize - 64)
	data = append(data, "  x: [\n"...)
	want := fmt.Sprintf("config.yaml:%d: config: did not find expected '-' indicator", 2*n+2)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Load("config.yaml", data, registered); fmt.Sprint(err) != want {
			b.Fatalf("%v, want %s", err, want)
		}
	}
}
