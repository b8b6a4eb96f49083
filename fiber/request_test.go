package fiberlimit

import (
	"context"
	"net/http/httptest"
	"testing"

	"github.com/gofiber/fiber/v2"

	"github.com/bucketry/ratelimit/fiber/internal/fibertest"
)

// TestUserContextKey: fiber keeps the context of c.SetUserContext where
// request.Context reads it, so that Context returns what c.UserContext()
// would: the context a handler before set, or context.Background(), then
// without storing it as a user value.
func TestUserContextKey(t *testing.T) {
	userContextOnce.Do(checkUserContextKey)
	if !userContextKnown {
		t.Fatalf("fiber keeps c.SetUserContext's context elsewhere than user value %q: request.Context calls c.UserContext()", userContextKey)
	}
	type key struct{}
	set := context.WithValue(context.Background(), key{}, "set")
	app := fibertest.NewApp()
	app.Get("/set", func(c *fiber.Ctx) error {
		c.SetUserContext(set)
		if got := (request{c}).Context(); got != set {
			t.Errorf("request.Context() = %v, want the context set, %v", got, set)
		}
		return nil
	})
	app.Get("/none", func(c *fiber.Ctx) error {
		if got := (request{c}).Context(); got != context.Background() {
			t.Errorf("request.Context() = %v, want context.Background()", got)
		}
		if v := c.Context().UserValue(userContextKey); v != nil {
			t.Errorf("after request.Context(), user value %q = %v, want none", userContextKey, v)
		}
		if got := c.UserContext(); got != context.Background() {
			t.Errorf("c.UserContext() = %v, want context.Background()", got)
		}
		return nil
	})
	for _, path := range []string{"/set", "/none"} {
		if _, err := app.Test(httptest.NewRequest("GET", path, nil), -1); err != nil {
			t.Fatal(err)
		}
	}
}
