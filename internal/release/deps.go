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

// A depCase is a consumer whose module graph must stay free of some
// modules: what a user of those packages downloads.
type depCase struct {
	name      string
	pkgs      []string // the project packages it imports
	forbidden []string // third-party module path prefixes (with exclusive's boundary rule)
}

// everyone is what no consumer of a framework adapter and a store needs.
var everyone = []string{"google.golang.org/grpc", "github.com/gofiber/fiber", "github.com/redis/rueidis", "go.uber.org/mock", "github.com/golang/mock"}

func depCases() []depCase {
	return []depCase{
		{
			name:      "gin + goredis",
			pkgs:      []string{rootPath + "/gin", rootPath + "/adapters/goredis"},
			forbidden: everyone,
		},
		{
			name:      "nethttp",
			pkgs:      []string{rootPath + "/nethttp"},
			forbidden: append(slices.Clone(everyone), "github.com/redis/go-redis", "github.com/go-redis/redis", "github.com/gin-gonic/gin"),
		},
	}
}

// deps makes a consumer of d's packages, tidies it, and checks its module
// graph (go list -m all, go mod graph): a forbidden module, or a test or
// tool module of the project, that a module of ours brings in fails; one
// that only a third-party module requires is reported, since nothing of
// ours can remove it.
func (c *consumers) deps(ctx context.Context, log io.Writer, d depCase) error {
	gets, err := c.modulesOf(d.pkgs)
	if err != nil {
		return err
	}
	dir, err := c.env.consumerModule(ctx, c.dir, dirName("deps", d.name))
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(mainFile(d.pkgs)), 0o644); err != nil {
		return err
	}
	if _, err := c.env.run(ctx, dir, append([]string{"get"}, gets...)...); err != nil {
		return err
	}
	if _, err := c.env.run(ctx, dir, "mod", "tidy"); err != nil {
		return err
	}
	list, err := c.env.run(ctx, dir, "list", "-m", "all")
	if err != nil {
		return err
	}
	graph, err := c.env.run(ctx, dir, "mod", "graph")
	if err != nil {
		return err
	}
	fmt.Fprintf(log, "go list -m all (imports %s):\n%s\n", strings.Join(d.pkgs, ", "), indent(string(list), "    "))
	forbidden := func(p string) bool {
		if isProject(p) {
			m := c.ws.Module(p)
			return m == nil || !m.Library
		}
		return slices.ContainsFunc(d.forbidden, func(prefix string) bool { return hasPrefix(p, prefix) })
	}
	findings := AnalyzeDeps(strings.Split(strings.TrimSpace(string(list)), "\n"), ParseGraph(string(graph)), forbidden, isProject)
	var bad []string
	for _, f := range findings {
		if f.Ours {
			bad = append(bad, f.String())
			fmt.Fprintln(log, "FAIL", f)
		} else {
			fmt.Fprintln(log, "note", f)
		}
	}
	if len(findings) == 0 {
		fmt.Fprintln(log, "none of the forbidden modules is in the graph")
	}
	if len(bad) > 0 {
		return fmt.Errorf("%s", strings.Join(bad, "\n"))
	}
	return nil
}

// A DepFinding is a forbidden module in a consumer's module graph.
type DepFinding struct {
	Module     string   // "google.golang.org/grpc v1.85.0", as go list -m all prints it
	Ours       bool     // reached from the consumer through modules of ours only
	Chain      []string // when Ours: the consumer, then module@version nodes down to it
	RequiredBy []string // otherwise: the modules whose go.mod requires it
}

func (f DepFinding) String() string {
	if f.Ours {
		return fmt.Sprintf("%s: brought in by %s", f.Module, strings.Join(f.Chain, " -> "))
	}
	return fmt.Sprintf("%s: in the graph only because %s require(s) it, not through a module of ours", f.Module, strings.Join(f.RequiredBy, ", "))
}

// ParseGraph parses the output of go mod graph into edges.
func ParseGraph(out string) [][2]string {
	var edges [][2]string
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) == 2 {
			edges = append(edges, [2]string{f[0], f[1]})
		}
	}
	return edges
}

func nodePath(node string) string {
	p, _, _ := strings.Cut(node, "@")
	return p
}

// AnalyzeDeps finds the forbidden modules of list (the lines of go list -m
// all, the main module first) and says for each whether the consumer
// reaches it through modules of ours alone (the main module, then modules
// for which ours is true) in graph, the edges of go mod graph.
func AnalyzeDeps(list []string, graph [][2]string, forbidden, ours func(path string) bool) []DepFinding {
	if len(list) == 0 {
		return nil
	}
	main := strings.Fields(list[0])[0]
	next := map[string][]string{}
	for _, e := range graph {
		next[e[0]] = append(next[e[0]], e[1])
	}
	parent := map[string]string{main: ""}
	queue := []string{main}
	for len(queue) > 0 {
		n := queue[0]
		queue = queue[1:]
		if n != main && !ours(nodePath(n)) {
			continue // a third party's requirements are not ours to answer for
		}
		for _, m := range next[n] {
			if _, seen := parent[m]; !seen {
				parent[m] = n
				queue = append(queue, m)
			}
		}
	}
	var out []DepFinding
	for _, l := range list[1:] {
		f := strings.Fields(l)
		if len(f) == 0 || !forbidden(f[0]) {
			continue
		}
		finding := DepFinding{Module: strings.Join(f, " ")}
		reached := ""
		for n := range parent {
			if n != main && nodePath(n) == f[0] && (reached == "" || n < reached) {
				reached = n
			}
		}
		if reached != "" {
			finding.Ours = true
			for n := reached; n != ""; n = parent[n] {
				finding.Chain = append([]string{n}, finding.Chain...)
			}
		} else {
			for _, e := range graph {
				if nodePath(e[1]) == f[0] && !slices.Contains(finding.RequiredBy, e[0]) {
					finding.RequiredBy = append(finding.RequiredBy, e[0])
				}
			}
			slices.Sort(finding.RequiredBy)
		}
		out = append(out, finding)
	}
	return out
}
