package main

import (
	"fmt"
	"go/parser"
	"go/token"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// A QuickStart is one program of the README, marked by a line
// <!-- quickstart: NAME METHOD TARGET --> right before its ```go block.
type QuickStart struct {
	Name   string // "gin", "net/http", "gin-redis"
	Method string // an HTTP method ("GET"), or "grpc"
	Target string // the request path ("/hello"), or the full gRPC method ("/grpc.health.v1.Health/Check")
	Code   string // the block, as printed
	Line   int    // the marker's line in the README, from 1
}

// GRPC reports whether the quick start serves gRPC rather than HTTP.
func (q QuickStart) GRPC() bool { return q.Method == "grpc" }

var (
	markerRE     = regexp.MustCompile(`^<!--\s*quickstart:(.*?)-->$`)
	httpMethodRE = regexp.MustCompile(`^[A-Z]+$`)
)

// ExtractQuickStarts returns the quick starts of a README, in order. A
// marker that is malformed, not followed at once by a ```go line, or whose
// block is not closed, and two quick starts with one name, are errors.
func ExtractQuickStarts(readme string) ([]QuickStart, error) {
	lines := strings.Split(strings.ReplaceAll(readme, "\r\n", "\n"), "\n")
	var out []QuickStart
	var errs []string
	fail := func(line int, format string, args ...any) {
		errs = append(errs, fmt.Sprintf("README.md:%d: ", line)+fmt.Sprintf(format, args...))
	}
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(l, "<!--") || !strings.Contains(l, "quickstart") {
			continue
		}
		m := markerRE.FindStringSubmatch(l)
		if m == nil {
			fail(i+1, "malformed quick start marker %q: want <!-- quickstart: NAME METHOD TARGET -->", l)
			continue
		}
		f := strings.Fields(m[1])
		if len(f) != 3 {
			fail(i+1, "quick start marker %q: want 3 fields, NAME METHOD TARGET (GET /hello, or grpc /pkg.Service/Method)", l)
			continue
		}
		q := QuickStart{Name: f[0], Method: f[1], Target: f[2], Line: i + 1}
		if q.Method != "grpc" && !httpMethodRE.MatchString(q.Method) {
			fail(i+1, "quick start %s: method %q: want an HTTP method in capitals or grpc", q.Name, q.Method)
			continue
		}
		if !strings.HasPrefix(q.Target, "/") {
			fail(i+1, "quick start %s: target %q: want a path starting with /", q.Name, q.Target)
			continue
		}
		if i+1 >= len(lines) || strings.TrimSpace(lines[i+1]) != "```go" {
			fail(i+1, "quick start %s: the marker must be followed at once by a ```go line", q.Name)
			continue
		}
		end := -1
		for j := i + 2; j < len(lines); j++ {
			if strings.TrimSpace(lines[j]) == "```" {
				end = j
				break
			}
		}
		if end < 0 {
			fail(i+1, "quick start %s: its ```go block is not closed", q.Name)
			break
		}
		q.Code = strings.Join(lines[i+2:end], "\n") + "\n"
		if slices.ContainsFunc(out, func(o QuickStart) bool { return o.Name == q.Name }) {
			fail(i+1, "quick start %s: a second quick start with this name", q.Name)
		}
		out = append(out, q)
		i = end
	}
	if len(errs) > 0 {
		return out, fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	return out, nil
}

// Imports returns the import paths of a Go source file, in order.
func Imports(src string) ([]string, error) {
	f, err := parser.ParseFile(token.NewFileSet(), "main.go", src, parser.ImportsOnly)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, s := range f.Imports {
		p, err := strconv.Unquote(s.Path.Value)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// An InstallLine is a "go get MODULE@VERSION" line of the README that
// names a module of the project.
type InstallLine struct {
	Module, Version string
	Line            int
}

var installRE = regexp.MustCompile(`\bgo get (` + regexp.QuoteMeta(rootPath) + `[^\s@]*)@(\S+)`)

// InstallLines returns the go get commands of the README that name a
// module of the project.
func InstallLines(readme string) []InstallLine {
	var out []InstallLine
	for i, l := range strings.Split(readme, "\n") {
		for _, m := range installRE.FindAllStringSubmatch(l, -1) {
			out = append(out, InstallLine{Module: m[1], Version: m[2], Line: i + 1})
		}
	}
	return out
}

// CheckInstall checks the README's install lines against the workspace:
// each names a library module that users can import (not an internal one)
// at version, and the README states goVersion ("Go 1.26"), the newest go
// directive of the libraries.
func CheckInstall(ws *Workspace, readme, version string) []string {
	var errs []string
	lines := InstallLines(readme)
	if len(lines) == 0 {
		errs = append(errs, "README.md: no `go get "+rootPath+"/...@"+version+"` line")
	}
	for _, l := range lines {
		m := ws.Module(l.Module)
		switch {
		case m == nil:
			errs = append(errs, fmt.Sprintf("README.md:%d: go get %s: not a module of the workspace", l.Line, l.Module))
		case !m.Library || strings.Contains("/"+m.Dir+"/", "/internal/"):
			errs = append(errs, fmt.Sprintf("README.md:%d: go get %s: not a module users import", l.Line, l.Module))
		case l.Version != version:
			errs = append(errs, fmt.Sprintf("README.md:%d: go get %s@%s: want @%s", l.Line, l.Module, l.Version, version))
		}
	}
	if gv := ws.GoVersion(); gv != "" {
		mm := strings.Join(strings.SplitN(gv, ".", 3)[:min(2, len(strings.Split(gv, ".")))], ".")
		if !regexp.MustCompile(`\bGo ` + regexp.QuoteMeta(mm) + `\b`).MatchString(readme) {
			errs = append(errs, fmt.Sprintf("README.md: does not say \"Go %s\", the newest go directive of the libraries (%s)", mm, gv))
		}
	}
	return errs
}
