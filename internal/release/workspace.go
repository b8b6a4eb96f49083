package main

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/mod/modfile"
)

// rootPath is the path of the root module; every module of the project has
// it as a prefix.
const rootPath = "github.com/bucketry/ratelimit"

// libraryDirs are the library modules: those users require, released
// together at one version.
var libraryDirs = []string{
	"core", "keyfuncs", "flow", "nethttp", "gin", "fiber", "grpcinterceptor", "chi", "echo",
	"adapters/goredis", "adapters/rueidis", "internal/redisscript",
	"rules", "adapters/prometheus", "adapters/otel", "adapters/postgres",
}

// toolDirs are the modules that hold programs, suites and tools, which no
// library may require. A module in a directory whose name ends in test or
// tests ("test", "redistest", "redistests") is a test module and one of
// them too.
var toolDirs = []string{".", "conformance", "examples", "benchmarks", "internal/release", "cmd/ratelimit"}

// A Kind says what a module is released as.
type Kind int

const (
	Unknown Kind = iota // in neither list: the check asks to classify it
	Library
	TestOrTool
)

func (k Kind) String() string {
	return [...]string{"unclassified", "library", "test or tool"}[k]
}

// kindOf classifies the module in dir (slash-separated, relative to the
// workspace root).
func kindOf(dir string) Kind {
	base := path.Base(dir)
	switch {
	case slices.Contains(libraryDirs, dir):
		return Library
	case slices.Contains(toolDirs, dir), strings.HasSuffix(base, "test"), strings.HasSuffix(base, "tests"):
		return TestOrTool
	}
	return Unknown
}

// isProject reports whether a module path is one of this project's.
func isProject(p string) bool {
	return p == rootPath || strings.HasPrefix(p, rootPath+"/")
}

// A Module is one module of the workspace.
type Module struct {
	Dir     string // relative to the workspace root, slash-separated: ".", "adapters/goredis"
	AbsDir  string
	Path    string // the module path
	Kind    Kind
	Library bool // Kind == Library
	File    *modfile.File
}

// WorkDir returns the module's directory as go.work names it: "./core", or
// "." for the root.
func (m *Module) WorkDir() string {
	if m.Dir == "." {
		return "."
	}
	return "./" + m.Dir
}

// GoMod returns the name of the module's go.mod as messages show it.
func (m *Module) GoMod() string { return path.Join(m.Dir, "go.mod") }

// A Workspace is the modules that go.work lists, in its order.
type Workspace struct {
	Root    string
	Work    *modfile.WorkFile // nil in tests that build a workspace from go.mod files alone
	Modules []*Module
	byPath  map[string]*Module
}

// LoadWorkspace reads root/go.work and the go.mod of every module it uses.
func LoadWorkspace(root string) (*Workspace, error) {
	name := filepath.Join(root, "go.work")
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	wf, err := modfile.ParseWork(name, data, nil)
	if err != nil {
		return nil, err
	}
	var mods []*Module
	for _, u := range wf.Use {
		dir := path.Clean(filepath.ToSlash(u.Path))
		if filepath.IsAbs(u.Path) {
			return nil, fmt.Errorf("go.work: use %s: want a path inside the workspace", u.Path)
		}
		abs := filepath.Join(root, filepath.FromSlash(dir))
		data, err := os.ReadFile(filepath.Join(abs, "go.mod"))
		if err != nil {
			return nil, err
		}
		m, err := parseModule(dir, abs, data)
		if err != nil {
			return nil, err
		}
		mods = append(mods, m)
	}
	ws, err := newWorkspace(root, mods)
	if err != nil {
		return nil, err
	}
	ws.Work = wf
	return ws, nil
}

// newWorkspace indexes mods, which must have distinct module paths.
func newWorkspace(root string, mods []*Module) (*Workspace, error) {
	ws := &Workspace{Root: root, Modules: mods, byPath: map[string]*Module{}}
	for _, m := range mods {
		if other := ws.byPath[m.Path]; other != nil {
			return nil, fmt.Errorf("go.work: %s and %s both hold module %s", other.Dir, m.Dir, m.Path)
		}
		ws.byPath[m.Path] = m
	}
	return ws, nil
}

// parseModule parses the go.mod (data) of the module in dir (relative,
// slash-separated), abs on disk.
func parseModule(dir, abs string, data []byte) (*Module, error) {
	f, err := modfile.Parse(path.Join(dir, "go.mod"), data, nil)
	if err != nil {
		return nil, err
	}
	if f.Module == nil {
		return nil, fmt.Errorf("%s: no module directive", path.Join(dir, "go.mod"))
	}
	k := kindOf(dir)
	return &Module{Dir: dir, AbsDir: abs, Path: f.Module.Mod.Path, Kind: k, Library: k == Library, File: f}, nil
}

// Module returns the module of the workspace with the module path p, or nil.
func (ws *Workspace) Module(p string) *Module { return ws.byPath[p] }

// Libraries returns the library modules, in go.work order.
func (ws *Workspace) Libraries() []*Module {
	var libs []*Module
	for _, m := range ws.Modules {
		if m.Library {
			libs = append(libs, m)
		}
	}
	return libs
}

// ModuleOf returns the workspace module that provides the package with
// import path pkg (the longest module path that is a prefix of it), or nil.
func (ws *Workspace) ModuleOf(pkg string) *Module {
	var best *Module
	for _, m := range ws.Modules {
		if (pkg == m.Path || strings.HasPrefix(pkg, m.Path+"/")) && (best == nil || len(m.Path) > len(best.Path)) {
			best = m
		}
	}
	return best
}

// GoVersion returns the highest go directive of the library modules: the
// oldest Go a user of every library can build with.
func (ws *Workspace) GoVersion() string {
	v := ""
	for _, m := range ws.Libraries() {
		if m.File.Go != nil && compareGo(m.File.Go.Version, v) > 0 {
			v = m.File.Go.Version
		}
	}
	return v
}

// compareGo compares two Go versions of go directives ("1.25", "1.26.0");
// "" is older than any.
func compareGo(a, b string) int {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	if a == "" || b == "" {
		return strings.Compare(a, b)
	}
	for i := 0; i < max(len(pa), len(pb)); i++ {
		var x, y int
		if i < len(pa) {
			fmt.Sscan(pa[i], &x)
		}
		if i < len(pb) {
			fmt.Sscan(pb[i], &y)
		}
		if x != y {
			if x < y {
				return -1
			}
			return 1
		}
	}
	return 0
}

// order returns the modules so that each comes after the project modules it
// requires, as far as the requirements allow (a cycle keeps go.work order
// among its members).
func (ws *Workspace) order() []*Module {
	done := map[*Module]bool{}
	visiting := map[*Module]bool{}
	var out []*Module
	var visit func(m *Module)
	visit = func(m *Module) {
		if done[m] || visiting[m] {
			return
		}
		visiting[m] = true
		for _, r := range m.File.Require {
			if dep := ws.byPath[r.Mod.Path]; dep != nil {
				visit(dep)
			}
		}
		visiting[m] = false
		done[m] = true
		out = append(out, m)
	}
	for _, m := range ws.Modules {
		visit(m)
	}
	return out
}
