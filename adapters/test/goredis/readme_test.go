package goredis_test

import (
	"strings"
	"testing"

	redistests "github.com/bucketry/ratelimit/adapters/test"
)

// TestREADMEACL: the ACL rules the README gives are those the security
// tests run the stores under.
func TestREADMEACL(t *testing.T) {
	for block, rules := range map[string]string{
		"acl goredis":         redistests.GoRedisACL,
		"acl goredis cluster": redistests.GoRedisClusterACL,
		"acl rueidis":         redistests.RueidisACL,
		"acl rueidis cluster": redistests.RueidisClusterACL,
	} {
		want := "ACL SETUSER ratelimit reset on >PASSWORD " + rules
		if got := strings.TrimSpace(redistests.ReadmeBlock(t, block)); got != want {
			t.Errorf("README block %q:\n%s\nwant the rules the tests use:\n%s", block, got, want)
		}
	}
}
