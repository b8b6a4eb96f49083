package main

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"golang.org/x/mod/modfile"
)

// exclusive lists the third-party modules that only one library may
// require (owner, a module directory), or none (owner ""): a user of gin
// and go-redis must not download fiber, gRPC, rueidis or a mocking library
// because some other module of ours needs them. A prefix matches a module
// path at a path-element boundary, so "github.com/gofiber/fiber" covers
// github.com/gofiber/fiber/v2.
var exclusive = []struct{ prefix, owner string }{
	{"google.golang.org/grpc", "grpcinterceptor"},
	{"github.com/gofiber/fiber", "fiber"},
	{"github.com/gin-gonic/gin", "gin"},
	{"github.com/redis/rueidis", "adapters/rueidis"},
	{"github.com/redis/go-redis", "adapters/goredis"},
	{"github.com/go-redis/redis", "adapters/goredis"},
	{"go.uber.org/mock", ""},
	{"github.com/golang/mock", ""},
}

// hasPrefix reports whether module path p is prefix or lies under it.
func hasPrefix(p, prefix string) bool {
	return p == prefix || strings.HasPrefix(p, prefix+"/")
}

// A Violation is one requirement or directive of a go.mod that breaks the
// release rules.
type Violation struct {
	File string // "gin/go.mod"
	Line int    // 0 if unknown
	What string // "require github.com/x/y v1.2.3"
	Why  string

	unresolvable bool
}

func (v Violation) String() string {
	pos := v.File
	if v.Line > 0 {
		pos = fmt.Sprintf("%s:%d", v.File, v.Line)
	}
	return fmt.Sprintf("%s: %s: %s", pos, v.What, v.Why)
}

func lineOf(l *modfile.Line) int {
	if l == nil {
		return 0
	}
	return l.Start.Line
}

// ValidateGraph checks the go.mod of every library module against the
// release rules for version: each project module it requires is a library
// of the workspace required at exactly version; no replace directive; no
// test or tool module; and no third-party module that only another module
// may require (see exclusive). It returns the violations, in go.work order.
func ValidateGraph(ws *Workspace, version string) []Violation {
	var out []Violation
	for _, m := range ws.Modules {
		if m.Kind == Unknown {
			out = append(out, Violation{File: m.GoMod(), What: "module " + m.Path,
				Why: "neither a library nor a test or tool module: add its directory to libraryDirs or toolDirs in internal/release/workspace.go (test modules: a directory named *test or *tests)"})
		}
	}
	for _, m := range ws.Libraries() {
		out = append(out, validateModule(ws, m, version)...)
	}
	return out
}

func validateModule(ws *Workspace, m *Module, version string) []Violation {
	var out []Violation
	add := func(l *modfile.Line, what, why string, args ...any) {
		out = append(out, Violation{File: m.GoMod(), Line: lineOf(l), What: what, Why: fmt.Sprintf(why, args...)})
	}
	for _, r := range m.File.Require {
		what := "require " + r.Mod.Path + " " + r.Mod.Version
		if isProject(r.Mod.Path) {
			dep := ws.Module(r.Mod.Path)
			switch {
			case dep == nil:
				add(r.Syntax, what, "not a module of the workspace")
			case dep.Kind == TestOrTool:
				add(r.Syntax, what, "%s is a test or tool module, which no library may require: move the code that needs it into a test module", dep.Dir)
			case dep.Kind == Unknown:
				add(r.Syntax, what, "%s is not classified as a library", dep.Dir)
			case r.Mod.Version != version:
				add(r.Syntax, what, "want %s, the release version", version)
				out[len(out)-1].unresolvable = true
			}
			continue
		}
		for _, x := range exclusive {
			if !hasPrefix(r.Mod.Path, x.prefix) || x.owner == m.Dir {
				continue
			}
			if x.owner == "" {
				add(r.Syntax, what, "a test-only dependency, which no library may require: move the tests that need it into a test module")
			} else {
				add(r.Syntax, what, "only %s may require %s: move the code or tests that need it into %s or a test module", x.owner, x.prefix, x.owner)
			}
		}
	}
	for _, r := range m.File.Replace {
		what := "replace " + r.Old.Path
		if r.Old.Version != "" {
			what += " " + r.Old.Version
		}
		add(r.Syntax, what, "a library has no replace directive (consumers ignore it; go.work points development at the local copies)")
	}
	return out
}

// Notes says, one line per module, what the test and tool modules still do
// differently from the release layout: project modules required at another
// version than version, replace directives of project modules. These do
// not fail a check: only the workspace builds those modules.
func Notes(ws *Workspace, version string) []string {
	var out []string
	for _, m := range ws.Modules {
		if m.Kind != TestOrTool {
			continue
		}
		reqs, reps := 0, 0
		for _, r := range m.File.Require {
			if isProject(r.Mod.Path) && r.Mod.Version != version {
				reqs++
			}
		}
		for _, r := range m.File.Replace {
			if isProject(r.Old.Path) {
				reps++
			}
		}
		if reqs+reps > 0 {
			out = append(out, fmt.Sprintf("%s: %d project modules required at another version than %s, %d replaces of project modules (make tidy converts them)", m.GoMod(), reqs, version, reps))
		}
	}
	return out
}

// Unresolvable reports whether a violation leaves a consumer unable to
// resolve the graph at all (a project module at another version), so that
// building consumers would only repeat it.
func (v Violation) Unresolvable() bool { return v.unresolvable }

// ValidateWork checks go.work against the release layout: every module of
// the workspace that a module of it requires at version is replaced at
// version by its directory ("replace github.com/bucketry/ratelimit/core
// v0.1.0 => ./core"). Without that the go command reads the required
// version's go.mod from a proxy, and the workspace does not load until the
// version is published.
func ValidateWork(ws *Workspace, version string) []Violation {
	if ws.Work == nil {
		return nil
	}
	var required []*Module
	for _, m := range ws.Modules {
		for _, r := range m.File.Require {
			if dep := ws.Module(r.Mod.Path); dep != nil && r.Mod.Version == version && !slices.Contains(required, dep) {
				required = append(required, dep)
			}
		}
	}
	var out []Violation
	for _, dep := range ws.Modules { // in go.work order
		if !slices.Contains(required, dep) {
			continue
		}
		want := fmt.Sprintf("replace %s %s => %s", dep.Path, version, dep.WorkDir())
		i := slices.IndexFunc(ws.Work.Replace, func(r *modfile.Replace) bool {
			return r.Old.Path == dep.Path && (r.Old.Version == version || r.Old.Version == "")
		})
		switch {
		case i < 0:
			out = append(out, Violation{File: "go.work", What: "no " + want,
				Why: "the modules that require " + dep.Dir + " at " + version + " do not load in the workspace before " + version + " is published (make tidy adds it)"})
		case path.Clean(ws.Work.Replace[i].New.Path) != path.Clean(dep.WorkDir()) || ws.Work.Replace[i].New.Version != "":
			r := ws.Work.Replace[i]
			out = append(out, Violation{File: "go.work", Line: lineOf(r.Syntax), What: "replace " + r.Old.Path + " " + r.Old.Version + " => " + strings.TrimSpace(r.New.Path+" "+r.New.Version),
				Why: "want " + want})
		}
	}
	return out
}
