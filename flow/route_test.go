package flow

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/bucketry/ratelimit/core"
)

func TestRouteForms(t *testing.T) {
	for _, tc := range []struct {
		fn       func(string) string
		in, want string
	}{
		{ColonRoute, "/items/:id", "/items/{id}"},
		{ColonRoute, "/users/:name?", "/users/{name?}"},
		{ColonRoute, "/n/:id<int>", "/n/{id}"},
		{ColonRoute, "/files/*path", "/files/{path...}"},
		{ColonRoute, "/files/*", "/files/{*}"},
		{ColonRoute, "/files/+", "/files/{+}"},
		{ColonRoute, "", ""},
		{BraceRoute, "/items/{id}", "/items/{id}"},
		{BraceRoute, "/items/{id:[0-9]+}", "/items/{id}"},
		{BraceRoute, "/items/{id:[0-9]{3}}.json", "/items/{id}.json"},
		{BraceRoute, "/d/{a:x}-{b:y}", "/d/{a}-{b}"},
		{BraceRoute, "/static/*", "/static/{*}"},
		{MuxRoute, "GET /items/{id}", "/items/{id}"},
		{MuxRoute, "example.com/items/{id}", "example.com/items/{id}"},
		{MuxRoute, "/x/{$}", "/x/{$}"},
	} {
		if got := tc.fn(tc.in); got != tc.want {
			t.Errorf("route of %q = %q, want %q", tc.in, got, tc.want)
		}
		if got := tc.fn(tc.in); got != tc.want { // the cached answer
			t.Errorf("route of %q again = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestParseRouteSuggestsReportedRoute: core.ParseRoute refuses a route in a
// router's own syntax, and its error names the route the adapter reports
// for that template, which a rule selects.
func TestParseRouteSuggestsReportedRoute(t *testing.T) {
	for _, tc := range []struct {
		report func(string) string
		native string
	}{
		{ColonRoute, "/items/:id"},
		{ColonRoute, "/users/:name?"},
		{ColonRoute, "/n/:id<int>"},
		{ColonRoute, "/a/:x/b/:y?"},
		{ColonRoute, "/files/*path"},
		{ColonRoute, "/files/*"},
		{ColonRoute, "/files/+"},
		{ColonRoute, "/flights/:from-:to"},
		{ColonRoute, "/x/:a:b"},
		{BraceRoute, "/items/{id:[0-9]+}"},
		{BraceRoute, "/items/{id:[0-9]{3}}.json"},
		{BraceRoute, "/d/{a:x+}-{b:[y]}"},
		{BraceRoute, "/d/{a:x|y}/{b}/*"},
		{BraceRoute, "/static/*"},
	} {
		reported := tc.report(tc.native)
		_, err := core.ParseRoute(tc.native)
		if !errors.Is(err, core.ErrInvalidRule) || !strings.Contains(err.Error(), strconv.Quote(reported)) {
			t.Errorf("ParseRoute(%q) = %v; want an error wrapping ErrInvalidRule naming %q, the route the adapter reports", tc.native, err, reported)
			continue
		}
		sel, err := core.ParseRoute("GET " + reported)
		if err != nil || !sel.Match("GET", reported) {
			t.Errorf("ParseRoute(%q) = %v, %v; want a selector of the reported route", "GET "+reported, sel, err)
		}
	}
}
