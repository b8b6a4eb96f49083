package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
)

// RewriteGoMod sets every requirement of a module for which sibling is
// true to version and drops the replace directives of those modules. It
// reports whether it changed f.
func RewriteGoMod(f *modfile.File, version string, sibling func(path string) bool) (bool, error) {
	changed := false
	for _, r := range slices.Clone(f.Require) {
		if sibling(r.Mod.Path) && r.Mod.Version != version {
			if err := f.AddRequire(r.Mod.Path, version); err != nil {
				return changed, err
			}
			changed = true
		}
	}
	for _, r := range slices.Clone(f.Replace) {
		if sibling(r.Old.Path) {
			if err := f.DropReplace(r.Old.Path, r.Old.Version); err != nil {
				return changed, err
			}
			changed = true
		}
	}
	f.Cleanup()
	return changed, nil
}

// RewriteWork drops the replace directives of go.work (data) that replace
// a module of the workspace and appends one block that replaces each
// module at version by its directory, so that the workspace loads while
// version is not published.
func RewriteWork(data []byte, mods []*Module, version string) ([]byte, error) {
	wf, err := modfile.ParseWork("go.work", data, nil)
	if err != nil {
		return nil, err
	}
	ours := func(p string) bool {
		return slices.ContainsFunc(mods, func(m *Module) bool { return m.Path == p })
	}
	for _, r := range slices.Clone(wf.Replace) {
		if ours(r.Old.Path) {
			if err := wf.DropReplace(r.Old.Path, r.Old.Version); err != nil {
				return nil, err
			}
		}
	}
	wf.Cleanup()
	var b bytes.Buffer
	b.Write(bytes.TrimRight(modfile.Format(wf.Syntax), "\n"))
	b.WriteString("\n\n// The modules above at the version their go.mod files require each other\n")
	b.WriteString("// at: development uses the local copies, before and after the release.\n")
	b.WriteString("replace (\n")
	for _, m := range mods {
		fmt.Fprintf(&b, "\t%s %s => %s\n", m.Path, version, m.WorkDir())
	}
	b.WriteString(")\n")
	if _, err := modfile.ParseWork("go.work", b.Bytes(), nil); err != nil {
		return nil, fmt.Errorf("rewritten go.work: %w", err)
	}
	return b.Bytes(), nil
}

// StripSum removes the lines of a go.sum that name a module of the
// project: their hashes go stale with every change of the working tree,
// and the workspace does not need them.
func StripSum(data []byte) []byte {
	var out bytes.Buffer
	for _, l := range bytes.SplitAfter(data, []byte("\n")) {
		f := strings.Fields(string(l))
		if len(f) > 0 && isProject(f[0]) {
			continue
		}
		out.Write(l)
	}
	return out.Bytes()
}

type tidyOptions struct {
	root    string
	version string
	goBin   string
	keep    bool
}

// tidy runs the tidy command: rewrite, proxy, go mod tidy in dependency
// order, strip go.sum.
func tidy(ctx context.Context, o tidyOptions, out io.Writer) error {
	start := time.Now()
	ws, err := LoadWorkspace(o.root)
	if err != nil {
		return err
	}
	sibling := func(p string) bool { return ws.Module(p) != nil }
	for _, m := range ws.Modules {
		changed, err := RewriteGoMod(m.File, o.version, sibling)
		if err != nil {
			return fmt.Errorf("%s: %w", m.GoMod(), err)
		}
		if !changed {
			continue
		}
		data := modfile.Format(m.File.Syntax)
		if err := os.WriteFile(filepath.Join(m.AbsDir, "go.mod"), data, 0o644); err != nil {
			return err
		}
		fmt.Fprintf(out, "rewrote %s: project modules at %s, no replace of them\n", m.GoMod(), o.version)
	}
	workName := filepath.Join(o.root, "go.work")
	work, err := os.ReadFile(workName)
	if err != nil {
		return err
	}
	newWork, err := RewriteWork(work, ws.Modules, o.version)
	if err != nil {
		return err
	}
	if !bytes.Equal(work, newWork) {
		if err := os.WriteFile(workName, newWork, 0o644); err != nil {
			return err
		}
		fmt.Fprintf(out, "rewrote go.work: every module replaced at %s by its directory\n", o.version)
	}
	// Read again: the order and the proxy come from the rewritten files.
	if ws, err = LoadWorkspace(o.root); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "release-tidy-")
	if err != nil {
		return err
	}
	env, err := newGoEnv(ctx, o.goBin, tmp)
	if err != nil {
		os.RemoveAll(tmp)
		return err
	}
	defer func() {
		if o.keep {
			fmt.Fprintf(out, "kept %s\n", tmp)
			return
		}
		if err := env.cleanModCache(context.WithoutCancel(ctx)); err != nil {
			fmt.Fprintln(out, "cleaning the module cache:", err)
		}
		os.RemoveAll(tmp)
	}()
	// Every module in the proxy first, so that any module can be found;
	// then each is tidied after the modules it requires and written again,
	// so that those who require it read its tidied go.mod.
	if err := WriteProxy(env.proxy, o.version, ws.Modules...); err != nil {
		return err
	}
	var errs []error
	for _, m := range ws.order() {
		t := time.Now()
		if _, err := env.run(ctx, m.AbsDir, "mod", "tidy"); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", m.Dir, err))
			fmt.Fprintf(out, "FAIL go mod tidy in %s\n%s\n", m.Dir, indent(err.Error(), "    "))
			continue
		}
		if err := WriteProxy(env.proxy, o.version, m); err != nil {
			return err
		}
		fmt.Fprintf(out, "tidied %s (%.1fs)\n", m.Dir, time.Since(t).Seconds())
	}
	for _, m := range ws.Modules {
		name := filepath.Join(m.AbsDir, "go.sum")
		data, err := os.ReadFile(name)
		if errors.Is(err, os.ErrNotExist) {
			continue
		} else if err != nil {
			return err
		}
		stripped := StripSum(data)
		switch {
		case len(bytes.TrimSpace(stripped)) == 0:
			err = os.Remove(name)
		case !bytes.Equal(stripped, data):
			err = os.WriteFile(name, stripped, 0o644)
		}
		if err != nil {
			return err
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("go mod tidy failed in %d modules (%s)", len(errs), time.Since(start).Round(time.Second))
	}
	fmt.Fprintf(out, "tidy %s: %d modules at %s, in %s\n", o.version, len(ws.Modules), o.version, time.Since(start).Round(time.Second))
	return nil
}
