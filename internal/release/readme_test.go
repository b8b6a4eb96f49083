package main

import (
	"reflect"
	"strings"
	"testing"
)

const helloGin = "package main\n\nfunc main() {}\n"

func TestExtractQuickStarts(t *testing.T) {
	for _, tc := range []struct {
		name    string
		readme  string
		want    []QuickStart
		wantErr string // a substring of the error; "" for none
	}{
		{
			name:   "none",
			readme: "# x\n\n```go\npackage main\n```\n",
		},
		{
			name:   "http",
			readme: "# x\n<!-- quickstart: gin GET /hello -->\n```go\n" + helloGin + "```\ntext\n",
			want:   []QuickStart{{Name: "gin", Method: "GET", Target: "/hello", Code: helloGin, Line: 2}},
		},
		{
			name:   "grpc and extra spaces",
			readme: "  <!--quickstart:   grpc   grpc /grpc.health.v1.Health/Check-->\n```go\n" + helloGin + "```\n",
			want:   []QuickStart{{Name: "grpc", Method: "grpc", Target: "/grpc.health.v1.Health/Check", Code: helloGin, Line: 1}},
		},
		{
			name: "two, and an unmarked block between",
			readme: "<!-- quickstart: net/http GET /a -->\n```go\nA\n```\n\n```go\nB\n```\n" +
				"<!-- quickstart: fiber POST /c -->\n```go\nC\n```\n",
			want: []QuickStart{
				{Name: "net/http", Method: "GET", Target: "/a", Code: "A\n", Line: 1},
				{Name: "fiber", Method: "POST", Target: "/c", Code: "C\n", Line: 9},
			},
		},
		{
			name:   "CRLF line ends",
			readme: "<!-- quickstart: gin GET /hello -->\r\n```go\r\nA\r\n```\r\n",
			want:   []QuickStart{{Name: "gin", Method: "GET", Target: "/hello", Code: "A\n", Line: 1}},
		},
		{
			name:    "two fields",
			readme:  "<!-- quickstart: gin /hello -->\n```go\nA\n```\n",
			wantErr: "README.md:1: quick start marker",
		},
		{
			name:    "lower-case method",
			readme:  "<!-- quickstart: gin get /hello -->\n```go\nA\n```\n",
			wantErr: `method "get"`,
		},
		{
			name:    "target without slash",
			readme:  "<!-- quickstart: gin GET hello -->\n```go\nA\n```\n",
			wantErr: `target "hello"`,
		},
		{
			name:    "blank line before the block",
			readme:  "<!-- quickstart: gin GET /hello -->\n\n```go\nA\n```\n",
			wantErr: "followed at once by a ```go line",
		},
		{
			name:    "a sh block",
			readme:  "<!-- quickstart: gin GET /hello -->\n```sh\nA\n```\n",
			wantErr: "followed at once by a ```go line",
		},
		{
			name:    "not closed",
			readme:  "<!-- quickstart: gin GET /hello -->\n```go\nA\n",
			wantErr: "not closed",
		},
		{
			name:    "malformed marker",
			readme:  "<!-- quickstart gin GET /hello -->\n```go\nA\n```\n",
			wantErr: "malformed quick start marker",
		},
		{
			name:    "one name twice",
			readme:  "<!-- quickstart: gin GET /a -->\n```go\nA\n```\n<!-- quickstart: gin GET /b -->\n```go\nB\n```\n",
			wantErr: "README.md:5: quick start gin: a second quick start with this name",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ExtractQuickStarts(tc.readme)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ExtractQuickStarts() error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ExtractQuickStarts() error = %v, want none", err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("ExtractQuickStarts() = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestImports(t *testing.T) {
	src := "package main\n\nimport (\n\t\"cmp\"\n\tginlimit \"github.com/bucketry/ratelimit/gin\"\n\t_ \"embed\"\n)\n\nfunc main() {}\n"
	got, err := Imports(src)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"cmp", "github.com/bucketry/ratelimit/gin", "embed"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Imports() = %q, want %q", got, want)
	}
	if _, err := Imports("package main\nimport (\n"); err == nil {
		t.Error("Imports(unterminated) error = nil, want a parse error")
	}
}

func TestCheckInstall(t *testing.T) {
	ws := testWorkspace(t, map[string]string{
		"core":                 "module github.com/bucketry/ratelimit/core\ngo 1.25\n",
		"gin":                  "module github.com/bucketry/ratelimit/gin\ngo 1.26.0\n",
		"internal/redisscript": "module github.com/bucketry/ratelimit/internal/redisscript\ngo 1.25\n",
		"conformance":          "module github.com/bucketry/ratelimit/conformance\ngo 1.26.0\n",
	})
	for _, tc := range []struct {
		name   string
		readme string
		want   []string // substrings, one per problem
	}{
		{
			name:   "good",
			readme: "Go 1.26 or newer.\n\n    go get github.com/bucketry/ratelimit/gin@v0.1.0  # gin\n    go get github.com/bucketry/ratelimit/core@v0.1.0\n",
		},
		{
			name:   "no go get line",
			readme: "Go 1.26\n",
			want:   []string{"no `go get"},
		},
		{
			name:   "older Go",
			readme: "Go 1.25\ngo get github.com/bucketry/ratelimit/gin@v0.1.0\n",
			want:   []string{`does not say "Go 1.26"`},
		},
		{
			name: "wrong modules and version",
			readme: "Go 1.26\ngo get github.com/bucketry/ratelimit/gin@v0.0.9\ngo get github.com/bucketry/ratelimit/echo@v0.1.0\n" +
				"go get github.com/bucketry/ratelimit/conformance@v0.1.0\ngo get github.com/bucketry/ratelimit/internal/redisscript@v0.1.0\n",
			want: []string{
				"README.md:2: go get github.com/bucketry/ratelimit/gin@v0.0.9: want @v0.1.0",
				"README.md:3: go get github.com/bucketry/ratelimit/echo: not a module of the workspace",
				"README.md:4: go get github.com/bucketry/ratelimit/conformance: not a module users import",
				"README.md:5: go get github.com/bucketry/ratelimit/internal/redisscript: not a module users import",
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := CheckInstall(ws, tc.readme, "v0.1.0")
			if len(got) != len(tc.want) {
				t.Fatalf("CheckInstall() = %q, want %d problems like %q", got, len(tc.want), tc.want)
			}
			for i := range got {
				if !strings.Contains(got[i], tc.want[i]) {
					t.Errorf("CheckInstall()[%d] = %q, want it to contain %q", i, got[i], tc.want[i])
				}
			}
		})
	}
}
