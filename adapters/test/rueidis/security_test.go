package rueidis_test

import (
	"context"
	"testing"

	"github.com/redis/rueidis"

	rstore "github.com/bucketry/ratelimit/adapters/rueidis"
	redistests "github.com/bucketry/ratelimit/adapters/test"
	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/internal/redistest"
)

// securedDeployment returns the deployment of srv and cl for
// redistests.RunSecured, with clients that log in as the user asked for
// and use the servers' TLS configuration (nil without TLS). Client-side
// caching is on, as rueidis has it by default.
func securedDeployment(srv *redistest.Server, cl *redistest.ClusterServer) redistests.Deployment {
	client := func(t testing.TB, cluster bool, user string) (rueidis.Client, error) {
		opt := rueidis.ClientOption{InitAddress: []string{srv.Addr}, TLSConfig: srv.TLSConfig(), Username: user}
		if cluster {
			opt.InitAddress, opt.TLSConfig = cl.Addrs(), cl.TLSConfig()
		}
		if user != "" {
			opt.Password = redistests.ACLPassword
		}
		c, err := rueidis.NewClient(opt)
		if err != nil {
			return nil, err
		}
		t.Cleanup(c.Close)
		return c, nil
	}
	return redistests.Deployment{
		Standalone: srv,
		Cluster:    cl,
		Caching:    true,
		Ignored:    redistests.RueidisIgnoredRefusals,
		Store: func(t testing.TB, cluster bool, user string, o redistests.Options) (core.Store, error) {
			c, err := client(t, cluster, user)
			if err != nil {
				return nil, err
			}
			st, err := kit.New(c, kit.Options(o)...)
			if err != nil {
				return nil, err
			}
			return st, nil
		},
		Require: func(t testing.TB, cluster bool, user string) error {
			c, err := client(t, cluster, user)
			if err != nil {
				return err
			}
			prefix := redistests.ACLPrefix(redistests.Options{}).Prefix
			_, err = rstore.New(c, rstore.WithPrefix(prefix), rstore.WithRequireRedis())
			return err
		},
		Do: func(t testing.TB, cluster bool, user string, args ...string) error {
			c, err := client(t, cluster, user)
			if err != nil {
				return err
			}
			return c.Do(context.Background(), c.B().Arbitrary(args...).Build()).Error()
		},
	}
}

// TestSecurityACL: the store runs as a user restricted to RueidisACL
// (RueidisClusterACL in Cluster), which it needs all of, local denials
// from the client-side cache included.
func TestSecurityACL(t *testing.T) {
	srv := redistest.Standalone(t, redistests.ACLUsers(redistests.RueidisACL)...)
	cl := redistest.Cluster(t, redistests.ACLUsers(redistests.RueidisClusterACL)...)
	d := securedDeployment(srv, cl)
	d.ACL, d.ClusterACL = redistests.RueidisACL, redistests.RueidisClusterACL
	redistests.RunSecured(t, d)
	t.Run("each_rule_used", func(t *testing.T) { redistests.RunACLRulesUsed(t, d) })
}

// TestSecurityTLS: the store runs over TLS, with the servers' CA in
// ClientOption.TLSConfig.
func TestSecurityTLS(t *testing.T) {
	srv := redistest.Standalone(t, redistest.WithTLS())
	cl := redistest.Cluster(t, redistest.WithTLS())
	redistests.RunSecured(t, securedDeployment(srv, cl))
}
