package main

import (
	"reflect"
	"strings"
	"testing"

	"golang.org/x/mod/modfile"
)

func TestRewriteGoMod(t *testing.T) {
	sibling := func(p string) bool {
		return p == rootPath+"/core" || p == rootPath+"/keyfuncs" || p == rootPath+"/conformance"
	}
	for _, tc := range []struct {
		name        string
		in, want    string
		wantChanged bool
	}{
		{
			name: "the workspace layout",
			in: `module github.com/bucketry/ratelimit/gin

go 1.26.0

require (
	github.com/bucketry/ratelimit/core v0.0.0
	github.com/bucketry/ratelimit/keyfuncs v0.0.0 // indirect
	github.com/gin-gonic/gin v1.12.0
)

replace (
	github.com/bucketry/ratelimit/core => ../core
	github.com/bucketry/ratelimit/keyfuncs => ../keyfuncs
)

replace golang.org/x/sys => golang.org/x/sys v0.48.0
`,
			want: `module github.com/bucketry/ratelimit/gin

go 1.26.0

require (
	github.com/bucketry/ratelimit/core v0.1.0
	github.com/bucketry/ratelimit/keyfuncs v0.1.0 // indirect
	github.com/gin-gonic/gin v1.12.0
)

replace golang.org/x/sys => golang.org/x/sys v0.48.0
`,
			wantChanged: true,
		},
		{
			name: "single-line replace, and a module outside the workspace kept",
			in: "module github.com/bucketry/ratelimit/nethttp/test\n\ngo 1.26.0\n\n" +
				"require github.com/bucketry/ratelimit/conformance v0.0.0\n\nrequire github.com/bucketry/ratelimit/echo v0.0.0\n\n" +
				"replace github.com/bucketry/ratelimit/conformance => ../../conformance\n",
			want: "module github.com/bucketry/ratelimit/nethttp/test\n\ngo 1.26.0\n\n" +
				"require github.com/bucketry/ratelimit/conformance v0.1.0\n\nrequire github.com/bucketry/ratelimit/echo v0.0.0\n",
			wantChanged: true,
		},
		{
			name: "already released",
			in:   "module github.com/bucketry/ratelimit/keyfuncs\n\ngo 1.26.0\n\nrequire github.com/bucketry/ratelimit/core v0.1.0\n",
			want: "module github.com/bucketry/ratelimit/keyfuncs\n\ngo 1.26.0\n\nrequire github.com/bucketry/ratelimit/core v0.1.0\n",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := modfile.Parse("go.mod", []byte(tc.in), nil)
			if err != nil {
				t.Fatal(err)
			}
			changed, err := RewriteGoMod(f, "v0.1.0", sibling)
			if err != nil {
				t.Fatal(err)
			}
			if changed != tc.wantChanged {
				t.Errorf("RewriteGoMod() changed = %v, want %v", changed, tc.wantChanged)
			}
			if got := string(modfile.Format(f.Syntax)); got != tc.want {
				t.Errorf("RewriteGoMod() wrote\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

func TestStripSum(t *testing.T) {
	in := strings.Join([]string{
		"github.com/bucketry/ratelimit/core v0.1.0 h1:aaa=",
		"github.com/bucketry/ratelimit/core v0.1.0/go.mod h1:bbb=",
		"github.com/bucketry/ratelimitx v1.0.0 h1:keep=",
		"github.com/gin-gonic/gin v1.12.0 h1:ccc=",
		"github.com/bucketry/ratelimit v0.1.0/go.mod h1:ddd=",
		"",
	}, "\n")
	want := "github.com/bucketry/ratelimitx v1.0.0 h1:keep=\ngithub.com/gin-gonic/gin v1.12.0 h1:ccc=\n"
	if got := string(StripSum([]byte(in))); got != want {
		t.Errorf("StripSum() = %q, want %q", got, want)
	}
	if got := StripSum(nil); len(got) != 0 {
		t.Errorf("StripSum(nil) = %q, want empty", got)
	}
}

func TestDirName(t *testing.T) {
	for in, want := range map[[2]string]string{
		{"library", "adapters/goredis"}: "library-adapters-goredis",
		{"deps", "gin + goredis"}:       "deps-gin-goredis",
		{"quickstart", "net/http"}:      "quickstart-net-http",
		{"library", "."}:                "library",
	} {
		if got := dirName(in[0], in[1]); got != want {
			t.Errorf("dirName(%q, %q) = %q, want %q", in[0], in[1], got, want)
		}
	}
}

func TestMainFile(t *testing.T) {
	got := mainFile([]string{rootPath + "/core", rootPath + "/gin"})
	want := "package main\n\nimport (\n\t_ \"github.com/bucketry/ratelimit/core\"\n\t_ \"github.com/bucketry/ratelimit/gin\"\n)\n\nfunc main() {}\n"
	if got != want {
		t.Errorf("mainFile() = %q, want %q", got, want)
	}
	if !reflect.DeepEqual([]bool{importable(rootPath + "/internal/redisscript"), importable(rootPath + "/gin")}, []bool{false, true}) {
		t.Error("importable: internal packages must not be importable, others must")
	}
}

func TestRewriteWork(t *testing.T) {
	mods := []*Module{
		{Dir: ".", Path: rootPath},
		{Dir: "core", Path: rootPath + "/core"},
		{Dir: "adapters/goredis", Path: rootPath + "/adapters/goredis"},
	}
	in := "go 1.26.0\n\nuse (\n\t.\n\t./adapters/goredis\n\t./core\n)\n\nreplace golang.org/x/sys => golang.org/x/sys v0.48.0\n\nreplace github.com/bucketry/ratelimit/core v0.0.9 => ./core\n"
	want := `go 1.26.0

use (
	.
	./adapters/goredis
	./core
)

replace golang.org/x/sys => golang.org/x/sys v0.48.0

// The modules above at the version their go.mod files require each other
// at: development uses the local copies, before and after the release.
replace (
	github.com/bucketry/ratelimit v0.1.0 => .
	github.com/bucketry/ratelimit/core v0.1.0 => ./core
	github.com/bucketry/ratelimit/adapters/goredis v0.1.0 => ./adapters/goredis
)
`
	got, err := RewriteWork([]byte(in), mods, "v0.1.0")
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Fatalf("RewriteWork() =\n%s\nwant\n%s", got, want)
	}
	again, err := RewriteWork(got, mods, "v0.1.0")
	if err != nil {
		t.Fatal(err)
	}
	if string(again) != want {
		t.Errorf("RewriteWork(RewriteWork()) =\n%s\nwant it unchanged:\n%s", again, want)
	}
}
