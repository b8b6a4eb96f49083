package examples_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestReadmeSnippets keeps the README honest: every Go snippet that names
// its source ("from gin/example_test.go (Example)") must be made of lines
// of that file, which compiles and runs in make test. Comment lines and
// lines ending in a README-only comment are exempt only if marked so.
func TestReadmeSnippets(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```go\n(.*?)```").FindAllStringSubmatch(string(readme), -1)
	src := regexp.MustCompile(`[Ff]rom ([\w/]+\.go) \((\w+)\)`)
	checked := 0
	for _, b := range blocks {
		m := src.FindStringSubmatch(b[1])
		if m == nil {
			continue
		}
		code, err := os.ReadFile(filepath.Join("..", m[1]))
		if err != nil {
			t.Fatalf("README cites %s: %v", m[1], err)
		}
		if !strings.Contains(string(code), "func "+m[2]+"(") {
			t.Errorf("README cites %s (%s), which has no such function", m[1], m[2])
		}
		for _, line := range strings.Split(b[1], "\n") {
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
		checked++
	}
	if checked < 4 {
		t.Fatalf("checked %d README snippets, want at least 4 (quick start and one per framework)", checked)
	}
}
