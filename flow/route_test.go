package flow

import "testing"

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
