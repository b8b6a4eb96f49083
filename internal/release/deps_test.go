package main

import (
	"reflect"
	"strings"
	"testing"
)

func TestAnalyzeDeps(t *testing.T) {
	forbidden := func(p string) bool {
		return hasPrefix(p, "google.golang.org/grpc") || hasPrefix(p, "go.uber.org/mock") || p == rootPath+"/conformance"
	}
	const main = "example.com/consumer"
	for _, tc := range []struct {
		name  string
		list  []string
		graph string
		want  []DepFinding
	}{
		{
			name:  "clean",
			list:  []string{main, rootPath + "/nethttp v0.1.0", rootPath + "/core v0.1.0"},
			graph: main + " " + rootPath + "/nethttp@v0.1.0\n" + rootPath + "/nethttp@v0.1.0 " + rootPath + "/core@v0.1.0\n",
		},
		{
			name: "through a library and a test module of ours",
			list: []string{main, rootPath + "/gin v0.1.0", rootPath + "/conformance v0.1.0", "google.golang.org/grpc v1.85.0"},
			graph: main + " " + rootPath + "/gin@v0.1.0\n" +
				rootPath + "/gin@v0.1.0 " + rootPath + "/conformance@v0.1.0\n" +
				rootPath + "/conformance@v0.1.0 google.golang.org/grpc@v1.85.0\n",
			want: []DepFinding{
				{Module: rootPath + "/conformance v0.1.0", Ours: true, Chain: []string{main, rootPath + "/gin@v0.1.0", rootPath + "/conformance@v0.1.0"}},
				{Module: "google.golang.org/grpc v1.85.0", Ours: true, Chain: []string{main, rootPath + "/gin@v0.1.0", rootPath + "/conformance@v0.1.0", "google.golang.org/grpc@v1.85.0"}},
			},
		},
		{
			name: "only a third party's requirement",
			list: []string{main, rootPath + "/gin v0.1.0", "github.com/gin-gonic/gin v1.12.0", "github.com/quic-go/quic-go v0.59.0", "go.uber.org/mock v0.6.0"},
			graph: main + " " + rootPath + "/gin@v0.1.0\n" + main + " github.com/gin-gonic/gin@v1.12.0\n" + main + " github.com/quic-go/quic-go@v0.59.0\n" +
				rootPath + "/gin@v0.1.0 github.com/gin-gonic/gin@v1.12.0\n" +
				"github.com/gin-gonic/gin@v1.12.0 go.uber.org/mock@v0.6.0\n" +
				"github.com/quic-go/quic-go@v0.59.0 go.uber.org/mock@v0.5.0\n",
			want: []DepFinding{
				{Module: "go.uber.org/mock v0.6.0", RequiredBy: []string{"github.com/gin-gonic/gin@v1.12.0", "github.com/quic-go/quic-go@v0.59.0"}},
			},
		},
		{
			name:  "required by the consumer itself: its build needs it",
			list:  []string{main, "google.golang.org/grpc v1.85.0"},
			graph: main + " google.golang.org/grpc@v1.85.0\n",
			want:  []DepFinding{{Module: "google.golang.org/grpc v1.85.0", Ours: true, Chain: []string{main, "google.golang.org/grpc@v1.85.0"}}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := AnalyzeDeps(tc.list, ParseGraph(tc.graph), forbidden, isProject)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("AnalyzeDeps() =\n%v\nwant\n%v", got, tc.want)
			}
		})
	}
}

func TestDepFindingString(t *testing.T) {
	ours := DepFinding{Module: "m v1", Ours: true, Chain: []string{"a", "b@v1", "m@v1"}}
	if got, want := ours.String(), "m v1: brought in by a -> b@v1 -> m@v1"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	theirs := DepFinding{Module: "m v1", RequiredBy: []string{"x@v2"}}
	if got := theirs.String(); !strings.Contains(got, "only because x@v2") {
		t.Errorf("String() = %q, want it to name x@v2", got)
	}
}
