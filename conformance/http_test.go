package conformance

import (
	"net/http"
	"reflect"
	"testing"
)

func TestHTTPParseList(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []httpItem // nil: an error
	}{
		{"one item", `"api";q=50;w=5`, []httpItem{{"api", map[string]int64{"q": 50, "w": 5}}}},
		{"two items", `"per-ip";q=5;w=300, "per-user";r=0;t=10`, []httpItem{
			{"per-ip", map[string]int64{"q": 5, "w": 300}},
			{"per-user", map[string]int64{"r": 0, "t": 10}},
		}},
		{"no space, tabs around", "\t\"a\";r=1,\"b\";r=2 ", []httpItem{
			{"a", map[string]int64{"r": 1}},
			{"b", map[string]int64{"r": 2}},
		}},
		{"escapes", `"a\"b\\c";q=1`, []httpItem{{`a"b\c`, map[string]int64{"q": 1}}}},
		{"no parameters", `"a"`, []httpItem{{"a", map[string]int64{}}}},
		{"15 digits", `"a";q=999999999999999`, []httpItem{{"a", map[string]int64{"q": 999999999999999}}}},
		{"empty", ``, nil},
		{"token, not string", `api;q=1`, nil},
		{"unterminated", `"api;q=1`, nil},
		{"bad escape", `"a\n";q=1`, nil},
		{"control character", "\"a\x01\";q=1", nil},
		{"negative", `"a";q=-1`, nil},
		{"16 digits", `"a";q=1000000000000000`, nil},
		{"no value", `"a";q`, nil},
		{"parameter twice", `"a";q=1;q=2`, nil},
		{"upper-case key", `"a";Q=1`, nil},
		{"trailing comma", `"a";q=1,`, nil},
		{"missing comma", `"a";q=1 "b";q=2`, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := httpParseList(tc.in)
			switch {
			case tc.want == nil && err == nil:
				t.Fatalf("httpParseList(%q) = %v, want an error", tc.in, got)
			case tc.want != nil && err != nil:
				t.Fatalf("httpParseList(%q): %v", tc.in, err)
			case tc.want != nil && !reflect.DeepEqual(got, tc.want):
				t.Fatalf("httpParseList(%q) = %v, want %v", tc.in, got, tc.want)
			}
		})
	}
}

func TestHTTPRouteColonPattern(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"/items/{id}", "/items/:id"},
		{"/a/{x}/b/{y}", "/a/:x/b/:y"},
		{"/plain", "/plain"},
		{"/", "/"},
		{"/{}", "/{}"},
		{"/x{id}", "/x{id}"},
	} {
		if got := (HTTPRoute{Pattern: tc.in}).ColonPattern(); got != tc.want {
			t.Errorf("HTTPRoute{Pattern: %q}.ColonPattern() = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestHTTPInvariants: the checks every response of the suite goes through
// accept consistent fields and name each inconsistency.
func TestHTTPInvariants(t *testing.T) {
	call := func(status int, kv ...string) httpCall {
		h := http.Header{}
		for i := 0; i+1 < len(kv); i += 2 {
			h.Add(kv[i], kv[i+1])
		}
		return httpCall{name: "GET /x", status: status, header: h}
	}
	good := []string{httpLimit, "2", httpRemaining, "0", httpPolicy, `"api";q=2;w=20`, httpRateLimit, `"api";r=0;t=10`, httpRetryAfter, "10"}
	tests := []struct {
		name string
		c    httpCall
		bad  int
	}{
		{"consistent denial", call(429, good...), 0},
		{"no fields", call(200), 0},
		{"two Remaining lines", call(200, append(good[:8:8], httpRemaining, "0")...), 1},
		{"Remaining differs from r", call(200, httpRemaining, "1", httpPolicy, `"api";q=2;w=20`, httpRateLimit, `"api";r=0;t=10`), 1},
		{"Limit differs from q", call(200, httpLimit, "3", httpPolicy, `"api";q=2;w=20`, httpRateLimit, `"api";r=0;t=10`), 1},
		{"unlisted policy", call(200, httpPolicy, `"api";q=2;w=20`, httpRateLimit, `"other";r=0;t=10`), 1},
		{"r above q", call(200, httpPolicy, `"api";q=2;w=20`, httpRateLimit, `"api";r=3;t=10`), 1},
		{"Retry-After differs from t", call(429, httpPolicy, `"api";q=2;w=20`, httpRateLimit, `"api";r=0;t=10`, httpRetryAfter, "9"), 1},
		{"Retry-After 0", call(429, httpPolicy, `"api";q=2;w=20`, httpRateLimit, `"api";r=0;t=0`, httpRetryAfter, "0"), 1},
		{"Retry-After a date", call(503, httpRetryAfter, "Thu, 01 Jan 2026 00:00:10 GMT"), 1},
		{"Retry-After signed", call(503, httpRetryAfter, "+1"), 1},
		{"Retry-After 1 on a 503", call(503, httpRetryAfter, "1"), 0},
		{"zero window", call(200, httpPolicy, `"api";q=2;w=0`), 1},
		{"unparsable", call(200, httpPolicy, `api`), 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if errs := tc.c.invariants(); len(errs) != tc.bad {
				t.Fatalf("invariants(%v) = %v, want %d errors", tc.c.header, errs, tc.bad)
			}
		})
	}
}
