package examples_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// readmeBlock is one ```go block of the README.
type readmeBlock struct {
	code       string
	line       int    // of the ```go line, from 1
	quickStart string // the marker's fields, if a quick start
}

var quickStartMarker = regexp.MustCompile(`^<!--\s*quickstart:(.*?)-->$`)

// readmeBlocks returns the ```go blocks of README.md, each with the quick
// start marker on the line right before it, if any.
func readmeBlocks(t *testing.T) []readmeBlock {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	var blocks []readmeBlock
	for i := 0; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) != "```go" {
			continue
		}
		b := readmeBlock{line: i + 1}
		if i > 0 {
			if m := quickStartMarker.FindStringSubmatch(strings.TrimSpace(lines[i-1])); m != nil {
				b.quickStart = strings.TrimSpace(m[1])
			}
		}
		j := i + 1
		for j < len(lines) && strings.TrimSpace(lines[j]) != "```" {
			j++
		}
		b.code = strings.Join(lines[i+1:min(j, len(lines))], "\n") + "\n"
		blocks = append(blocks, b)
		i = j
	}
	return blocks
}

// TestReadmeSnippets keeps the README honest. A Go block is one of two
// kinds:
//
//   - a snippet that names its source ("from gin/example_test.go
//     (Example)") and is made of lines of that file, which compiles and
//     runs in make test; comment lines, and README-only comments after the
//     code, are exempt;
//   - a quick start: a whole program right after a <!-- quickstart: ... -->
//     marker line. It has no second copy: make release-check
//     (internal/release) builds and runs it exactly as printed against the
//     modules installed from a proxy of the working tree, and
//     TestReadmeQuickStartsCompile type-checks it in the workspace.
func TestReadmeSnippets(t *testing.T) {
	src := regexp.MustCompile(`[Ff]rom ([\w/]+\.go) \((\w+)\)`)
	cited := 0
	for _, b := range readmeBlocks(t) {
		if b.quickStart != "" {
			continue
		}
		m := src.FindStringSubmatch(b.code)
		if m == nil {
			t.Errorf("README.md:%d: a Go block that neither names its source (from x/example_test.go (Example)) nor is a quick start", b.line)
			continue
		}
		code, err := os.ReadFile(filepath.Join("..", m[1]))
		if err != nil {
			t.Fatalf("README cites %s: %v", m[1], err)
		}
		if !strings.Contains(string(code), "func "+m[2]+"(") {
			t.Errorf("README cites %s (%s), which has no such function", m[1], m[2])
		}
		for _, line := range strings.Split(b.code, "\n") {
			l := strings.TrimSpace(line)
			if l == "" || strings.HasPrefix(l, "//") {
				continue
			}
			if i := strings.Index(l, " // "); i > 0 && !strings.Contains(string(code), l) {
				l = strings.TrimSpace(l[:i]) // a README note after the code
			}
			if !strings.Contains(string(code), l) {
				t.Errorf("README snippet from %s: line %q is not in the source", m[1], l)
			}
		}
		cited++
	}
	if cited < 3 {
		t.Errorf("checked %d README snippets from examples, want at least 3 (one per framework section)", cited)
	}
}

// TestReadmeQuickStarts checks that the quick starts cover every framework
// adapter and a Redis store, and that each type-checks (go vet) against the
// modules of the workspace, so that an API change that breaks one fails
// here before make release-check runs it.
func TestReadmeQuickStarts(t *testing.T) {
	var imports []string
	n := 0
	for _, b := range readmeBlocks(t) {
		if b.quickStart == "" {
			continue
		}
		n++
		for _, m := range regexp.MustCompile(`"(github\.com/bucketry/ratelimit/[^"]+)"`).FindAllStringSubmatch(b.code, -1) {
			imports = append(imports, m[1])
		}
		if testing.Short() {
			continue
		}
		t.Run(strings.Fields(b.quickStart)[0], func(t *testing.T) {
			dir := t.TempDir()
			file := filepath.Join(dir, "main.go")
			if err := os.WriteFile(file, []byte(b.code), 0o644); err != nil {
				t.Fatal(err)
			}
			// Run from this module, so that the imports resolve in the
			// workspace (or through this module's requirements).
			out, err := exec.Command("go", "vet", file).CombinedOutput()
			if err != nil {
				t.Errorf("README.md:%d: quick start %q: go vet: %v\n%s", b.line, b.quickStart, err, out)
			}
		})
	}
	for _, want := range []string{"gin", "nethttp", "fiber", "grpcinterceptor", "adapters/goredis"} {
		if !slices.Contains(imports, "github.com/bucketry/ratelimit/"+want) {
			t.Errorf("no README quick start imports github.com/bucketry/ratelimit/%s", want)
		}
	}
	if n == 0 {
		t.Fatal("no quick start in README.md")
	}
}
