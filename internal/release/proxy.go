package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/mod/module"
	"golang.org/x/mod/zip"
)

// WriteProxy writes modules at version into dir in the layout of a module
// proxy that the go command reads through GOPROXY=file://dir:
// <escaped path>/@v/list, VERSION.info, VERSION.mod and VERSION.zip. The
// .mod file is the module's go.mod as it is on disk now; the zip is made by
// zip.CreateFromDir, which leaves out nested modules, version control
// directories and vendor trees, as a tag on the repository would.
func WriteProxy(dir string, version string, mods ...*Module) error {
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, time.Now().UTC().Truncate(time.Second)})
	if err != nil {
		return err
	}
	for _, m := range mods {
		esc, err := module.EscapePath(m.Path)
		if err != nil {
			return err
		}
		v := filepath.Join(dir, filepath.FromSlash(esc), "@v")
		if err := os.MkdirAll(v, 0o755); err != nil {
			return err
		}
		gomod, err := os.ReadFile(filepath.Join(m.AbsDir, "go.mod"))
		if err != nil {
			return err
		}
		files := map[string][]byte{
			"list":            []byte(version + "\n"),
			version + ".info": info,
			version + ".mod":  gomod,
		}
		for name, data := range files {
			if err := os.WriteFile(filepath.Join(v, name), data, 0o644); err != nil {
				return err
			}
		}
		if err := writeZip(filepath.Join(v, version+".zip"), module.Version{Path: m.Path, Version: version}, m.AbsDir); err != nil {
			return fmt.Errorf("%s: %w", m.GoMod(), err)
		}
	}
	return nil
}

func writeZip(name string, mv module.Version, dir string) (err error) {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	return zip.CreateFromDir(f, mv, dir)
}
