package main

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"golang.org/x/mod/modfile"
)

// testWorkspace builds a workspace from go.mod texts by module directory,
// in sorted directory order.
func testWorkspace(t *testing.T, gomods map[string]string) *Workspace {
	t.Helper()
	var dirs []string
	for d := range gomods {
		dirs = append(dirs, d)
	}
	slices.Sort(dirs)
	var mods []*Module
	for _, d := range dirs {
		m, err := parseModule(d, "/ws/"+d, []byte(gomods[d]))
		if err != nil {
			t.Fatal(err)
		}
		mods = append(mods, m)
	}
	ws, err := newWorkspace("/ws", mods)
	if err != nil {
		t.Fatal(err)
	}
	return ws
}

func TestKindOf(t *testing.T) {
	for _, tc := range []struct {
		dir  string
		want Kind
	}{
		{"core", Library},
		{"adapters/goredis", Library},
		{"internal/redisscript", Library},
		{".", TestOrTool},
		{"conformance", TestOrTool},
		{"examples", TestOrTool},
		{"benchmarks", TestOrTool},
		{"internal/release", TestOrTool},
		{"internal/redistest", TestOrTool},
		{"adapters/redistests", TestOrTool},
		{"adapters/test", TestOrTool},
		{"gin/test", TestOrTool},
		{"httprouter", Unknown},
		{"adapters/postgres", Library},
		{"cmd/ratelimit", TestOrTool},
		{"internal/pgtest", TestOrTool},
		{"adapters/mongo", Unknown},
	} {
		if got := kindOf(tc.dir); got != tc.want {
			t.Errorf("kindOf(%q) = %v, want %v", tc.dir, got, tc.want)
		}
	}
}

// A clean workspace in the release layout; the cases below break one rule
// each.
var cleanGoMods = map[string]string{
	".":           "module github.com/bucketry/ratelimit\ngo 1.25\n",
	"core":        "module github.com/bucketry/ratelimit/core\ngo 1.25\n",
	"keyfuncs":    "module github.com/bucketry/ratelimit/keyfuncs\ngo 1.26.0\nrequire github.com/bucketry/ratelimit/core v0.1.0\n",
	"conformance": "module github.com/bucketry/ratelimit/conformance\ngo 1.26.0\nrequire (\n\tgithub.com/bucketry/ratelimit/core v0.1.0\n\tgo.uber.org/mock v0.6.0\n\tgoogle.golang.org/grpc v1.85.0\n)\n",
	"gin": `module github.com/bucketry/ratelimit/gin

go 1.26.0

require (
	github.com/bucketry/ratelimit/core v0.1.0
	github.com/bucketry/ratelimit/keyfuncs v0.1.0
	github.com/gin-gonic/gin v1.12.0
)

require go.uber.org/atomic v1.12.0 // indirect
`,
	"gin/test":        "module github.com/bucketry/ratelimit/gin/test\ngo 1.26.0\nrequire (\n\tgithub.com/bucketry/ratelimit/gin v0.1.0\n\tgithub.com/bucketry/ratelimit/conformance v0.1.0\n)\nreplace github.com/bucketry/ratelimit/gin => ../\n",
	"grpcinterceptor": "module github.com/bucketry/ratelimit/grpcinterceptor\ngo 1.26.0\nrequire google.golang.org/grpc v1.85.0\n",
}

func TestValidateGraph(t *testing.T) {
	for _, tc := range []struct {
		name string
		dir  string // the module whose go.mod the case replaces ("" for none)
		mod  string
		want []string
	}{
		{name: "clean"},
		{
			name: "sibling at v0.0.0 with replace",
			dir:  "keyfuncs",
			mod:  "module github.com/bucketry/ratelimit/keyfuncs\ngo 1.26.0\nrequire github.com/bucketry/ratelimit/core v0.0.0\nreplace github.com/bucketry/ratelimit/core => ../core\n",
			want: []string{
				"keyfuncs/go.mod:3: require github.com/bucketry/ratelimit/core v0.0.0: want v0.1.0, the release version",
				"keyfuncs/go.mod:4: replace github.com/bucketry/ratelimit/core: a library has no replace directive",
			},
		},
		{
			name: "a replace of a third party",
			dir:  "core",
			mod:  "module github.com/bucketry/ratelimit/core\ngo 1.25\nreplace golang.org/x/sys v0.1.0 => golang.org/x/sys v0.2.0\n",
			want: []string{"core/go.mod:3: replace golang.org/x/sys v0.1.0: a library has no replace directive"},
		},
		{
			name: "test modules and test-only dependencies",
			dir:  "gin",
			mod: `module github.com/bucketry/ratelimit/gin

go 1.26.0

require (
	github.com/bucketry/ratelimit/conformance v0.1.0
	github.com/bucketry/ratelimit/core v0.1.0
	github.com/bucketry/ratelimit/gin/test v0.1.0
	github.com/gin-gonic/gin v1.12.0
	go.uber.org/mock v0.6.0 // indirect
	google.golang.org/grpc v1.85.0 // indirect
	google.golang.org/grpc/examples v0.0.0-20250101000000-abcdefabcdef // indirect
	google.golang.org/grpcx v1.0.0 // indirect
)
`,
			want: []string{
				"gin/go.mod:6: require github.com/bucketry/ratelimit/conformance v0.1.0: conformance is a test or tool module",
				"gin/go.mod:8: require github.com/bucketry/ratelimit/gin/test v0.1.0: gin/test is a test or tool module",
				"gin/go.mod:10: require go.uber.org/mock v0.6.0: a test-only dependency",
				"gin/go.mod:11: require google.golang.org/grpc v1.85.0: only grpcinterceptor may require google.golang.org/grpc",
				"gin/go.mod:12: require google.golang.org/grpc/examples v0.0.0-20250101000000-abcdefabcdef: only grpcinterceptor",
			},
		},
		{
			name: "another framework and both Redis clients",
			dir:  "keyfuncs",
			mod: "module github.com/bucketry/ratelimit/keyfuncs\ngo 1.26.0\nrequire (\n\tgithub.com/bucketry/ratelimit/core v0.1.0\n" +
				"\tgithub.com/gofiber/fiber/v2 v2.52.15\n\tgithub.com/gin-gonic/gin v1.12.0\n\tgithub.com/redis/go-redis/v9 v9.23.0\n\tgithub.com/redis/rueidis v1.0.79\n)\n",
			want: []string{
				"keyfuncs/go.mod:5: require github.com/gofiber/fiber/v2 v2.52.15: only fiber may require",
				"keyfuncs/go.mod:6: require github.com/gin-gonic/gin v1.12.0: only gin may require",
				"keyfuncs/go.mod:7: require github.com/redis/go-redis/v9 v9.23.0: only adapters/goredis may require",
				"keyfuncs/go.mod:8: require github.com/redis/rueidis v1.0.79: only adapters/rueidis may require",
			},
		},
		{
			name: "a project module outside the workspace",
			dir:  "core",
			mod:  "module github.com/bucketry/ratelimit/core\ngo 1.25\nrequire github.com/bucketry/ratelimit/httprouter v0.1.0\n",
			want: []string{"core/go.mod:3: require github.com/bucketry/ratelimit/httprouter v0.1.0: not a module of the workspace"},
		},
		{
			name: "an unclassified module",
			dir:  "httprouter",
			mod:  "module github.com/bucketry/ratelimit/httprouter\ngo 1.26.0\n",
			want: []string{"httprouter/go.mod: module github.com/bucketry/ratelimit/httprouter: neither a library nor a test or tool module"},
		},
		{
			name: "a test module may do anything",
			dir:  "gin/test",
			mod:  "module github.com/bucketry/ratelimit/gin/test\ngo 1.26.0\nrequire (\n\tgithub.com/bucketry/ratelimit/gin v0.0.0\n\tgo.uber.org/mock v0.6.0\n)\nreplace github.com/bucketry/ratelimit/gin => ../\n",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mods := map[string]string{}
			for d, m := range cleanGoMods {
				mods[d] = m
			}
			if tc.dir != "" {
				mods[tc.dir] = tc.mod
			}
			got := ValidateGraph(testWorkspace(t, mods), "v0.1.0")
			wantUnresolvable := tc.name == "sibling at v0.0.0 with replace"
			if u := slices.ContainsFunc(got, Violation.Unresolvable); u != wantUnresolvable {
				t.Errorf("ValidateGraph() has an unresolvable violation = %v, want %v", u, wantUnresolvable)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("ValidateGraph() = %d violations:\n%s\nwant %d:\n%s", len(got), joinViolations(got), len(tc.want), strings.Join(tc.want, "\n"))
			}
			for i, v := range got {
				if !strings.HasPrefix(v.String(), tc.want[i]) {
					t.Errorf("ValidateGraph()[%d] = %q, want it to start with %q", i, v, tc.want[i])
				}
			}
		})
	}
}

func joinViolations(vs []Violation) string {
	var s []string
	for _, v := range vs {
		s = append(s, v.String())
	}
	return strings.Join(s, "\n")
}

func TestNotes(t *testing.T) {
	got := Notes(testWorkspace(t, cleanGoMods), "v0.1.0")
	want := []string{"gin/test/go.mod: 0 project modules required at another version than v0.1.0, 1 replaces of project modules (make tidy converts them)"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Notes() = %q, want %q", got, want)
	}
}

func TestGoVersionAndOrder(t *testing.T) {
	ws := testWorkspace(t, cleanGoMods)
	if got := ws.GoVersion(); got != "1.26.0" {
		t.Errorf("GoVersion() = %q, want 1.26.0", got)
	}
	var order []string
	for _, m := range ws.order() {
		order = append(order, m.Dir)
	}
	// Sorted directories, each after what it requires.
	want := []string{".", "core", "conformance", "keyfuncs", "gin", "gin/test", "grpcinterceptor"}
	if !reflect.DeepEqual(order, want) {
		t.Errorf("order() = %q, want %q", order, want)
	}
	if m := ws.ModuleOf("github.com/bucketry/ratelimit/gin/test/helpers"); m == nil || m.Dir != "gin/test" {
		t.Errorf("ModuleOf(gin/test/helpers) = %v, want gin/test", m)
	}
	if m := ws.ModuleOf("github.com/bucketry/ratelimit/ginx"); m == nil || m.Dir != "." {
		t.Errorf("ModuleOf(ginx) = %v, want the root module", m)
	}
}

func TestCompareGo(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"1.25", "1.26.0", -1},
		{"1.26.0", "1.26", 0},
		{"1.26.1", "1.26", 1},
		{"1.9", "1.10", -1},
		{"", "1.21", -1},
		{"1.21", "", 1},
	} {
		if got := compareGo(tc.a, tc.b); got != tc.want {
			t.Errorf("compareGo(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestValidateWork(t *testing.T) {
	for _, tc := range []struct {
		name string
		work string
		want []string
	}{
		{
			name: "every required module replaced",
			work: "go 1.26.0\nuse (\n\t.\n\t./core\n)\nreplace (\n\tgithub.com/bucketry/ratelimit/core v0.1.0 => ./core\n\tgithub.com/bucketry/ratelimit/keyfuncs v0.1.0 => ./keyfuncs/\n" +
				"\tgithub.com/bucketry/ratelimit/conformance v0.1.0 => ./conformance\n\tgithub.com/bucketry/ratelimit/gin v0.1.0 => ./gin\n)\n",
		},
		{
			name: "missing and wrong",
			work: "go 1.26.0\nuse ./core\nreplace github.com/bucketry/ratelimit/core v0.1.0 => ./gin\nreplace github.com/bucketry/ratelimit/gin v0.1.0 => github.com/fork/gin v0.1.0\n",
			want: []string{
				"go.work: no replace github.com/bucketry/ratelimit/conformance v0.1.0 => ./conformance: the modules that require conformance at v0.1.0",
				"go.work:3: replace github.com/bucketry/ratelimit/core v0.1.0 => ./gin: want replace github.com/bucketry/ratelimit/core v0.1.0 => ./core",
				"go.work:4: replace github.com/bucketry/ratelimit/gin v0.1.0 => github.com/fork/gin v0.1.0: want replace github.com/bucketry/ratelimit/gin v0.1.0 => ./gin",
				"go.work: no replace github.com/bucketry/ratelimit/keyfuncs v0.1.0 => ./keyfuncs",
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws := testWorkspace(t, cleanGoMods)
			wf, err := modfile.ParseWork("go.work", []byte(tc.work), nil)
			if err != nil {
				t.Fatal(err)
			}
			ws.Work = wf
			got := ValidateWork(ws, "v0.1.0")
			if len(got) != len(tc.want) {
				t.Fatalf("ValidateWork() = %d violations:\n%s\nwant %d:\n%s", len(got), joinViolations(got), len(tc.want), strings.Join(tc.want, "\n"))
			}
			for i, v := range got {
				if !strings.HasPrefix(v.String(), tc.want[i]) {
					t.Errorf("ValidateWork()[%d] = %q, want it to start with %q", i, v, tc.want[i])
				}
			}
		})
	}
}
