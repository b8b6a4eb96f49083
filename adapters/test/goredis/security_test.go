package goredis_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/bucketry/ratelimit/adapters/goredis"
	redistests "github.com/bucketry/ratelimit/adapters/test"
	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/internal/redistest"
)

// securedDeployment returns the deployment of srv and cl for
// redistests.RunSecured, with clients that log in as the user asked for
// and use the servers' TLS configuration (nil without TLS).
func securedDeployment(srv *redistest.Server, cl *redistest.ClusterServer) redistests.Deployment {
	client := func(t testing.TB, cluster bool, user string) redis.UniversalClient {
		var password string
		if user != "" {
			password = redistests.ACLPassword
		}
		var c redis.UniversalClient
		if cluster {
			c = redis.NewClusterClient(&redis.ClusterOptions{
				Addrs: cl.Addrs(), Username: user, Password: password, TLSConfig: cl.TLSConfig(),
				PoolSize: 64, ContextTimeoutEnabled: true,
			})
		} else {
			c = redis.NewClient(&redis.Options{
				Addr: srv.Addr, Username: user, Password: password, TLSConfig: srv.TLSConfig(),
				PoolSize: 64, ContextTimeoutEnabled: true,
			})
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	return redistests.Deployment{
		Standalone: srv,
		Cluster:    cl,
		Store: func(t testing.TB, cluster bool, user string, o redistests.Options) (core.Store, error) {
			st, err := kit.New(client(t, cluster, user), kit.Options(o)...)
			if err != nil {
				return nil, err
			}
			return st, nil
		},
		Require: func(t testing.TB, cluster bool, user string) error {
			prefix := redistests.ACLPrefix(redistests.Options{}).Prefix
			_, err := goredis.New(client(t, cluster, user), goredis.WithPrefix(prefix), goredis.WithRequireRedis())
			return err
		},
		Do: func(t testing.TB, cluster bool, user string, args ...string) error {
			cmd := make([]any, len(args))
			for i, a := range args {
				cmd[i] = a
			}
			return client(t, cluster, user).Do(context.Background(), cmd...).Err()
		},
	}
}

// TestSecurityACL: the store runs as a user restricted to
// GoRedisACL (GoRedisClusterACL in Cluster), which it needs all of.
func TestSecurityACL(t *testing.T) {
	srv := redistest.Standalone(t, redistests.ACLUsers(redistests.GoRedisACL)...)
	cl := redistest.Cluster(t, redistests.ACLUsers(redistests.GoRedisClusterACL)...)
	d := securedDeployment(srv, cl)
	d.ACL, d.ClusterACL = redistests.GoRedisACL, redistests.GoRedisClusterACL
	redistests.RunSecured(t, d)
	t.Run("each_rule_used", func(t *testing.T) { redistests.RunACLRulesUsed(t, d) })
}

// TestSecurityTLS: the store runs over TLS, with the servers' CA in
// Options.TLSConfig and ClusterOptions.TLSConfig.
func TestSecurityTLS(t *testing.T) {
	srv := redistest.Standalone(t, redistest.WithTLS())
	cl := redistest.Cluster(t, redistest.WithTLS())
	redistests.RunSecured(t, securedDeployment(srv, cl))
}
