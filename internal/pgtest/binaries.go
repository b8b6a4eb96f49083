package pgtest

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// defaultBinGlob is where Debian and Ubuntu install the server binaries,
// one directory per major version, off PATH.
const defaultBinGlob = "/usr/lib/postgresql/*/bin"

// binaries are the initdb and postgres of one installation.
type binaries struct {
	initdb, postgres string
}

// findBinaries looks for initdb and postgres of one installation: on PATH
// (through lookPath) first, then in the directories glob matches, the
// highest version first.
func findBinaries(lookPath func(string) (string, error), glob string) (binaries, error) {
	if initdb, err := lookPath("initdb"); err == nil {
		// The postgres beside initdb is of the same version; another one on
		// PATH may not be.
		if pg := filepath.Join(filepath.Dir(initdb), "postgres"); isExecutable(pg) {
			return binaries{initdb, pg}, nil
		}
		if pg, err := lookPath("postgres"); err == nil {
			return binaries{initdb, pg}, nil
		}
	}
	dirs, _ := filepath.Glob(glob)
	// "/usr/lib/postgresql/15/bin" before ".../9.6/bin": by version.
	slices.SortFunc(dirs, func(a, b string) int { return compareVersions(versionOf(b), versionOf(a)) })
	for _, d := range dirs {
		b := binaries{filepath.Join(d, "initdb"), filepath.Join(d, "postgres")}
		if isExecutable(b.initdb) && isExecutable(b.postgres) {
			return b, nil
		}
	}
	return binaries{}, errors.New("pgtest: initdb and postgres not found on PATH nor under " + glob + ": " + installHint)
}

// versionOf reads the numbers of the version directory in a path such as
// /usr/lib/postgresql/15/bin.
func versionOf(binDir string) []int {
	var v []int
	for f := range strings.SplitSeq(filepath.Base(filepath.Dir(binDir)), ".") {
		n, err := strconv.Atoi(f)
		if err != nil {
			return v
		}
		v = append(v, n)
	}
	return v
}

func compareVersions(a, b []int) int { return slices.Compare(a, b) }

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}
