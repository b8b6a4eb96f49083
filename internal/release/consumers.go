package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// consumers builds fresh consumer modules under dir.
type consumers struct {
	ws      *Workspace
	env     *goEnv
	version string
	dir     string
}

// dirName turns a module directory or quick start name into a directory
// name: ("deps", "gin + goredis") -> "deps-gin-goredis".
func dirName(prefix, s string) string {
	var b strings.Builder
	b.WriteString(prefix)
	dash := true
	for _, r := range strings.ToLower(s) {
		if ('a' <= r && r <= 'z') || ('0' <= r && r <= '9') {
			if dash {
				b.WriteByte('-')
				dash = false
			}
			b.WriteRune(r)
		} else {
			dash = true
		}
	}
	return b.String()
}

// mainFile is a program that imports pkgs for their side effects only.
func mainFile(pkgs []string) string {
	var b strings.Builder
	b.WriteString("package main\n\nimport (\n")
	for _, p := range pkgs {
		fmt.Fprintf(&b, "\t_ %q\n", p)
	}
	b.WriteString(")\n\nfunc main() {}\n")
	return b.String()
}

// importable reports whether a consumer outside the project may import
// pkg: not an internal package of it.
func importable(pkg string) bool {
	return !slices.Contains(strings.Split(pkg, "/"), "internal")
}

// library installs module m as a user would (go get m@version) into a new
// module and builds a program that imports each of its packages; a module
// with no package a user may import (internal/...) is built as a
// dependency.
func (c *consumers) library(ctx context.Context, log io.Writer, m *Module) error {
	d, err := c.env.consumerModule(ctx, c.dir, dirName("library", m.Dir))
	if err != nil {
		return err
	}
	if _, err := c.env.run(ctx, d, "get", m.Path+"@"+c.version); err != nil {
		return err
	}
	out, err := c.env.run(ctx, d, "list", "-f", "{{.ImportPath}} {{.Name}}", m.Path+"/...")
	if err != nil {
		return err
	}
	var pkgs, internal []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(l)
		if len(f) != 2 || f[1] == "main" {
			continue
		}
		if importable(f[0]) {
			pkgs = append(pkgs, f[0])
		} else {
			internal = append(internal, f[0])
		}
	}
	fmt.Fprintf(log, "packages: %s\n", strings.Join(append(pkgs, internal...), " "))
	if len(pkgs) == 0 && len(internal) == 0 {
		return fmt.Errorf("%s@%s holds no package", m.Path, c.version)
	}
	if len(pkgs) == 0 {
		_, err := c.env.run(ctx, d, append([]string{"build", "-trimpath"}, internal...)...)
		return err
	}
	if err := os.WriteFile(filepath.Join(d, "main.go"), []byte(mainFile(pkgs)), 0o644); err != nil {
		return err
	}
	_, err = c.env.run(ctx, d, "build", "-trimpath", "-o", filepath.Join(d, "consumer"), ".")
	return err
}

// modulesOf returns the project modules that provide the given imports, as
// MODULE@VERSION arguments of go get.
func (c *consumers) modulesOf(imports []string) ([]string, error) {
	var out []string
	for _, p := range imports {
		if !isProject(p) {
			continue
		}
		m := c.ws.ModuleOf(p)
		if m == nil {
			return nil, fmt.Errorf("import %q: no module of the workspace provides it", p)
		}
		if arg := m.Path + "@" + c.version; !slices.Contains(out, arg) {
			out = append(out, arg)
		}
	}
	return out, nil
}
