package redistests

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bucketry/ratelimit/conformance"
	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/internal/redistest"
)

// The least Redis ACL of each store, as ACL SETUSER rules for a user
// created with `reset` (no commands, keys or channels to begin with):
//
//	ACL SETUSER ratelimit reset on >password ~ratelimit:* +evalsha +eval ...
//
// Every command the store or its client sends is allowed, except those
// whose refusal the client ignores (RueidisIgnoredRefusals), and each rule
// is needed: RunSecured runs the stores as such a user and RunACLRulesUsed
// shows Redis refusing a command that the store or its client sends once
// any one rule is taken away. Commands that scripts call (redis.call in take.lua) are
// checked against the ACL like the others. A store WithPrefix(p) needs
// ~p:* instead of ACLKeys.
const (
	// ACLKeys is the key pattern of the stores' keys with the default
	// prefix: <prefix>:<rule>:<identity>.
	ACLKeys = "~ratelimit:*"

	// GoRedisACL is what a go-redis store needs of a standalone server.
	GoRedisACL = ACLKeys +
		" +evalsha" + // every decision: the script by its SHA1
		" +eval" + // the script in full, after NOSCRIPT (a restarted or flushed server)
		" +get" + // in the script: a bucket's state
		" +mget" + // in the script: the states of a call's several buckets at once
		" +set" + // in the script: a bucket's new state, with its expiry
		" +del" + // Reset; in the script, a Cluster refund that leaves a bucket as if new
		" +time" // in the script, without WithClientClock: the server's clock

	// GoRedisClusterACL is what a go-redis store needs of a Cluster.
	GoRedisClusterACL = GoRedisACL +
		" +cluster|slots" + // the ClusterClient's slot map, and the store's per-node topology
		" +command" // the ClusterClient's table of key positions; refused, it asks again before every command

	// RueidisACL is what a rueidis store needs of a standalone server.
	RueidisACL = GoRedisACL +
		" +client|tracking" + // NewClient: client-side caching, CLIENT TRACKING ON OPTIN on every connection
		" +client|caching" + // WithLocalDenials: CLIENT CACHING YES before a cached read, or Redis does not track it
		" +multi +exec" + // WithLocalDenials: a cached read is MULTI, PTTL, GET, EXEC
		" +pttl" // WithLocalDenials: the key's expiry, which bounds the cached copy's

	// RueidisClusterACL is what a rueidis store needs of a Cluster.
	RueidisClusterACL = RueidisACL +
		" +cluster|slots" // the client's slot map, and the store's per-node topology

	// ACLRequireRedis is the rule a store WithRequireRedis needs besides
	// its ACL: New checks that Redis answers with PING (every master, in
	// Cluster). Without the option the stores send no PING of their own.
	ACLRequireRedis = "+ping"

	// RueidisIgnoredRefusals are the commands, space-separated, that rueidis
	// sends and a user with RueidisACL or RueidisClusterACL is refused,
	// and whose refusal it ignores: PING, which checks an idle connection
	// (any reply, NOPERM included, shows it alive), and on a standalone
	// server given as the only address CLUSTER SLOTS, with which NewClient
	// asks whether it is a Cluster (a refusal naming CLUSTER makes it a
	// standalone client).
	// Redis logs each refusal in ACL LOG.
	RueidisIgnoredRefusals = "ping cluster|slots"
)

// aclLogLen is the length of ACL LOG that ACLUsers asks for.
const aclLogLen = 100_000

// ACLUser and ACLPassword are the credentials of the restricted user that
// the tests' stores log in as; RequireUser has the same password and
// ACLRequireRedis too.
const (
	ACLUser     = "ratelimit"
	ACLPassword = "ratelimit-test-password"
	RequireUser = "ratelimit-require"
)

// ACLUsers returns the options that give a server the user ACLUser with
// the rules acl (ACLKeys and commands, space-separated), RequireUser with
// acl and ACLRequireRedis and, for each command rule, a user lacking only
// that rule, LackingUser(rule), all with ACLPassword, for RunSecured and
// RunACLRulesUsed; and room in ACL LOG for every refusal the tests look
// for.
func ACLUsers(acl string) []redistest.Option {
	rules := strings.Fields(acl)
	opts := []redistest.Option{
		// Redis merges a refusal into one of the last 10 entries alike,
		// else adds one, dropping the oldest past acllog-max-len (128 by
		// default): refusals of several users interleaved fill it fast.
		redistest.WithArgs("--acllog-max-len", strconv.Itoa(aclLogLen)),
		redistest.WithACLUser(ACLUser, ACLPassword, rules...),
		redistest.WithACLUser(RequireUser, ACLPassword, append(slices.Clone(rules), ACLRequireRedis)...),
	}
	for i, r := range rules {
		if strings.HasPrefix(r, "+") {
			opts = append(opts, redistest.WithACLUser(LackingUser(r), ACLPassword, slices.Delete(slices.Clone(rules), i, i+1)...))
		}
	}
	return opts
}

// LackingUser names the user of ACLUsers that lacks rule: "lacking-evalsha"
// for "+evalsha", "lacking-client|caching" for "+client|caching".
func LackingUser(rule string) string { return "lacking-" + strings.TrimPrefix(rule, "+") }

// ACLPrefix returns o with its prefix under ACLKeys: "ratelimit:" and o's
// prefix (a NewPrefix if empty). Stores that share a prefix still share
// one afterwards.
func ACLPrefix(o Options) Options {
	if o.Prefix == "" {
		o.Prefix = NewPrefix()
	}
	o.Prefix = "ratelimit:" + o.Prefix
	return o
}

// Deployment is a standalone server and a Cluster secured alike (an ACL
// user, or TLS), and how one store's tests reach them. All fields are
// required unless said otherwise.
type Deployment struct {
	Standalone *redistest.Server
	Cluster    *redistest.ClusterServer

	// ACL and ClusterACL are the rules of ACLUser on Standalone and on
	// Cluster, which must have the users of ACLUsers; the stores then log
	// in as ACLUser. Both empty: the stores log in as the default user.
	ACL, ClusterACL string

	// Store returns a store with the options o on a client of its own, on
	// Cluster when cluster is set, else on Standalone, logged in as user
	// with ACLPassword ("" for the default user, without one), over TLS
	// when the servers use it. It returns the error of a client or store
	// that cannot be made.
	Store func(t testing.TB, cluster bool, user string, o Options) (core.Store, error)

	// Do sends one command as user on a client of its own, as Store's
	// client would, and returns its error.
	Do func(t testing.TB, cluster bool, user string, args ...string) error

	// Require makes a store WithRequireRedis as user, with the client
	// Store would use, and returns New's error; optional.
	Require func(t testing.TB, cluster bool, user string) error

	// Caching reports that the stores' local denials read bucket states
	// through a client-side cache that Redis invalidates (rueidis).
	Caching bool

	// Ignored are the commands, space-separated, that the client may be
	// refused without harm (RueidisIgnoredRefusals); optional.
	Ignored string
}

// user is who the stores of d log in as.
func (d *Deployment) user() string {
	if d.ACL == "" && d.ClusterACL == "" {
		return ""
	}
	return ACLUser
}

// store is d.Store failing t on error.
func (d *Deployment) store(t testing.TB, cluster bool, o Options) core.Store {
	t.Helper()
	st, err := d.Store(t, cluster, d.user(), o)
	if err != nil {
		t.Fatalf("store as user %q: %v", d.user(), err)
	}
	return st
}

// nodes returns the servers of one topology.
func (d *Deployment) nodes(cluster bool) []*redistest.Server {
	if cluster {
		return d.Cluster.Nodes()
	}
	return []*redistest.Server{d.Standalone}
}

// topology names the servers of d.Cluster or of d.Standalone, as subtests
// do.
func topology(cluster bool) string {
	if cluster {
		return "cluster"
	}
	return "standalone"
}

// RunSecured runs the stores of d as they would run in production behind
// an ACL or TLS, on both topologies: the conformance suite, with and
// without local denials; a probe doing once each thing the stores send
// Redis (the script in full after SCRIPT FLUSH, the server's clock, a
// refund across Cluster slots, Reset, local denials and, with Caching, an
// invalidation); and, first, the distributed exactness test. Every store's
// keys are under ACLKeys. With TLS, every server listens for TLS only. With an
// ACL, Redis must have refused ACLUser nothing but d.Ignored throughout,
// and then refuses it a command outside the ACL, keys outside ACLKeys and
// a store with another prefix. With d.Require, a store WithRequireRedis
// starts, and with an ACL only for RequireUser: ACLUser is refused PING.
func RunSecured(t *testing.T, d Deployment) {
	if d.Standalone == nil || d.Cluster == nil || d.Store == nil || (d.user() != "" && d.Do == nil) {
		t.Fatal("RunSecured: Deployment needs Standalone, Cluster, Store, and with an ACL Do")
	}
	if d.Standalone.TLSConfig() != nil {
		for _, n := range append(d.nodes(false), d.nodes(true)...) {
			checkTLSOnly(t, n)
		}
	}
	t.Run("distributed_exactness", func(t *testing.T) {
		RunDistributedExactness(t, func(t testing.TB, cluster bool, o Options) core.Store {
			return d.store(t, cluster, ACLPrefix(o))
		})
	})
	for _, cluster := range []bool{false, true} {
		t.Run(topology(cluster), func(t *testing.T) {
			newStore := func(t testing.TB, o Options) core.Store { return d.store(t, cluster, ACLPrefix(o)) }
			t.Run("conformance", func(t *testing.T) {
				conformance.RunStoreSuite(t, Harness(newStore))
			})
			t.Run("conformance_local_denials", func(t *testing.T) {
				conformance.RunStoreSuite(t, Harness(func(t testing.TB, o Options) core.Store {
					o.LocalDenials = true
					return newStore(t, o)
				}))
			})
			t.Run("probe", func(t *testing.T) {
				if err := probe(t, d, cluster, d.user()); err != nil {
					t.Fatal(err)
				}
			})
			if d.user() == "" {
				return
			}
			// Before the refusals below and of require_redis add their own.
			t.Run("nothing_else_refused", func(t *testing.T) {
				ignored := strings.Fields(d.Ignored)
				for _, e := range refusals(t, d.nodes(cluster), ACLUser) {
					if e.reason != "command" || !slices.Contains(ignored, e.object) {
						t.Errorf("%s refused %s: %s %q (%d times, in %s), want nothing refused but %q",
							e.node, ACLUser, e.reason, e.object, e.count, e.context, d.Ignored)
						continue
					}
					t.Logf("%s refused %s %q %d times, which the client ignores", e.node, ACLUser, e.object, e.count)
				}
			})
			t.Run("refused", func(t *testing.T) {
				testRefused(t, d, cluster)
			})
		})
	}
	if d.Require != nil {
		for _, cluster := range []bool{false, true} {
			t.Run(topology(cluster)+"_require_redis", func(t *testing.T) {
				user := d.user()
				if user != "" {
					if err := d.Require(t, cluster, user); !errors.Is(err, core.ErrUnavailable) || !isRefusal(err) {
						t.Errorf("New WithRequireRedis as %s, without %s: %v, want core.ErrUnavailable and NOPERM", user, ACLRequireRedis, err)
					}
					user = RequireUser
				}
				if err := d.Require(t, cluster, user); err != nil {
					t.Errorf("New WithRequireRedis as %q: %v", user, err)
				}
			})
		}
	}
}

// checkTLSOnly fails t unless n has no plain TCP port and listens for TLS
// on its Addr.
func checkTLSOnly(t *testing.T, n *redistest.Server) {
	t.Helper()
	for _, kv := range [][2]string{{"port", "0"}, {"tls-port", fmt.Sprint(n.Port)}} {
		v, err := n.Do("CONFIG", "GET", kv[0])
		if a, ok := v.([]any); err != nil || !ok || len(a) != 2 || a[1] != kv[1] {
			t.Fatalf("%s: CONFIG GET %s = %v, %v; want %s", n.Addr, kv[0], v, err, kv[1])
		}
	}
}

// testRefused checks that Redis refuses ACLUser what the ACL does not
// allow: other commands, other keys, a store with another prefix.
func testRefused(t *testing.T, d Deployment, cluster bool) {
	for _, args := range [][]string{
		{"FLUSHALL"},                   // a command outside the ACL
		{"CONFIG", "GET", "maxmemory"}, // an administrative one
		{"SET", "other:key", "v"},      // an allowed command on a key outside ACLKeys
		{"GET", "ratelimitx"},          // outside ACLKeys by one character
	} {
		if err := d.Do(t, cluster, ACLUser, args...); !isRefusal(err) {
			t.Errorf("%q as %s: error %v, want NOPERM", args, ACLUser, err)
		}
	}
	// The script's keys are checked too: a store under another prefix
	// cannot take.
	st := d.store(t, cluster, Options{Prefix: "other"})
	b := core.Bucket{Rule: "r", Key: "u", Limit: Limits(t, core.TokenBucket(core.PerMinute(1), 1))[0]}
	tk := &core.Take{Cost: 1, Buckets: []core.Bucket{b}, States: make([]core.BucketState, 1)}
	if err := st.Take(context.Background(), tk); !isRefusal(err) {
		t.Errorf("Take by a store with prefix \"other\": %v, want NOPERM", err)
	}
}

// isRefusal reports whether err is Redis refusing a command or key for
// lack of permission.
func isRefusal(err error) bool { return err != nil && strings.Contains(err.Error(), "NOPERM") }

// RunACLRulesUsed shows that each command rule of d.ACL and d.ClusterACL
// is needed: run as the user of ACLUsers that lacks it, the probe of
// RunSecured makes Redis refuse the command the rule allows. The stores
// of d must log in as ACLUser.
func RunACLRulesUsed(t *testing.T, d Deployment) {
	if d.user() == "" || d.Store == nil {
		t.Fatal("RunACLRulesUsed: Deployment needs ACL, ClusterACL and Store")
	}
	for _, cluster := range []bool{false, true} {
		acl := d.ACL
		if cluster {
			acl = d.ClusterACL
		}
		t.Run(topology(cluster), func(t *testing.T) {
			t.Parallel() // the topologies share no server
			for _, rule := range strings.Fields(acl) {
				if !strings.HasPrefix(rule, "+") {
					continue
				}
				t.Run(rule, func(t *testing.T) {
					// Each user has its own ACL LOG entries, and a SCRIPT
					// FLUSH by another probe only makes this one send EVAL
					// again. The probe without +eval, though, must find the
					// script missing, so no other probe may load it: it runs
					// alone, before the parallel ones start.
					if rule != "+eval" {
						t.Parallel()
					}
					user := LackingUser(rule)
					err := probe(t, d, cluster, user)
					want := strings.TrimPrefix(rule, "+")
					got := refusals(t, d.nodes(cluster), user)
					for _, e := range got {
						if e.reason == "command" && e.object == want {
							t.Logf("without %s: %s refused %d times (in %s); probe: %v", rule, want, e.count, e.context, err)
							return
						}
					}
					t.Fatalf("without %s: Redis refused %s nothing of %s (refusals %+v; probe: %v)", rule, user, want, got, err)
				})
			}
		})
	}
}

// probe does, as user, once each thing the stores send Redis on one
// topology, and returns the first error.
func probe(t testing.TB, d Deployment, cluster bool, user string) error {
	// Without the script, the first call is answered NOSCRIPT and the
	// script is sent in full.
	for _, n := range d.nodes(cluster) {
		if _, err := n.Do("SCRIPT", "FLUSH"); err != nil {
			t.Fatalf("%s: SCRIPT FLUSH: %v", n.Addr, err)
		}
	}
	one := Limits(t, core.TokenBucket(core.PerMinute(1), 1))[0]
	take := func(st core.Store, cost int64, bs ...core.Bucket) (*core.Take, error) {
		tk := &core.Take{Cost: cost, Buckets: bs, States: make([]core.BucketState, len(bs))}
		return tk, st.Take(context.Background(), tk)
	}
	newStore := func(o Options) (core.Store, error) { return d.Store(t, cluster, user, ACLPrefix(o)) }

	// The server's clock, in the script.
	st, err := newStore(Options{})
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	if _, err := take(st, 1, core.Bucket{Rule: "x", Key: "u", Limit: one}); err != nil {
		return fmt.Errorf("take by the server's clock: %w", err)
	}

	// Two buckets that, in Cluster, lie in different slots: the first
	// denies, the second's token is given back.
	clock := core.NewManualClock(T0)
	prefix := NewPrefix()
	if st, err = newStore(Options{Prefix: prefix, Clock: clock}); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	keys, ok := st.(interface{ Key(rule, id string) string })
	if !ok {
		t.Fatalf("%T has no Key method to pick buckets in different slots", st)
	}
	id := SplitID(keys.Key, "u", "x", "y")
	x := core.Bucket{Rule: "x", Key: id, Limit: one}
	y := core.Bucket{Rule: "y", Key: id, Limit: one}
	if _, err := take(st, 1, x); err != nil {
		return fmt.Errorf("take: %w", err)
	}
	tk, err := take(st, 1, x, y)
	if err != nil {
		return fmt.Errorf("take on two buckets: %w", err)
	}
	if Allowed(tk) || !tk.States[1].Allowed || tk.States[1].Remaining != 1 {
		return fmt.Errorf("take on two buckets, the first empty: %+v, want denied by the first, the second untouched", tk.States)
	}
	// Two buckets in one slot: one script call reads both, with MGET.
	z := core.Bucket{Rule: SameSlotRule(keys.Key, x.Rule, id, "z"), Key: id, Limit: one}
	if _, err := take(st, 0, x, z); err != nil {
		return fmt.Errorf("read of two buckets in one slot: %w", err)
	}

	// Local denials by instance a, then a reset by instance b.
	local := Options{Prefix: NewPrefix(), Clock: clock, LocalDenials: true}
	a, err := newStore(local)
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	b, err := newStore(local)
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	for i := range 4 {
		tk, err := take(a, 1, x)
		if err != nil {
			return fmt.Errorf("take %d with local denials: %w", i, err)
		}
		if Allowed(tk) != (i == 0) {
			return fmt.Errorf("take %d with local denials: %+v, want allowed only the first time", i, tk.States[0])
		}
	}
	resetter, ok := b.(interface {
		Reset(ctx context.Context, rule, id string) error
	})
	if !ok {
		t.Fatalf("%T has no Reset method", b)
	}
	if err := resetter.Reset(context.Background(), x.Rule, x.Key); err != nil {
		return fmt.Errorf("reset: %w", err)
	}
	if !d.Caching {
		return nil
	}
	// Redis tells a's client that the key changed: a asks Redis again, and
	// the full bucket admits.
	deadline := time.Now().Add(5 * time.Second)
	for {
		tk, err := take(a, 1, x)
		if err != nil {
			return fmt.Errorf("take after another instance's reset: %w", err)
		}
		if Allowed(tk) {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("5s after another instance's reset, the client-side cache still holds the old state: no invalidation")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// refusal is one entry of ACL LOG.
type refusal struct {
	node, reason, context, object string
	count                         int64
}

// refusals returns the entries of ACL LOG on nodes that name user. It
// fails t if a log is full: it may have dropped some.
func refusals(t testing.TB, nodes []*redistest.Server, user string) []refusal {
	t.Helper()
	var out []refusal
	for _, n := range nodes {
		v, err := n.Do("ACL", "LOG", strconv.Itoa(aclLogLen))
		entries, ok := v.([]any)
		if err != nil || !ok {
			t.Fatalf("%s: ACL LOG = %v, %v", n.Addr, v, err)
		}
		if v, err := n.Do("CONFIG", "GET", "acllog-max-len"); err != nil {
			t.Fatalf("%s: CONFIG GET acllog-max-len: %v", n.Addr, err)
		} else if kv, _ := v.([]any); len(kv) != 2 || kv[1] != strconv.Itoa(aclLogLen) || len(entries) >= aclLogLen {
			t.Fatalf("%s: acllog-max-len %v with %d entries: want %d, not full (start the servers with ACLUsers)", n.Addr, v, len(entries), aclLogLen)
		}
		for _, e := range entries {
			kv, _ := e.([]any)
			f := map[string]any{}
			for i := 0; i+1 < len(kv); i += 2 {
				if k, ok := kv[i].(string); ok {
					f[k] = kv[i+1]
				}
			}
			if f["username"] != user {
				continue
			}
			r := refusal{node: n.Addr}
			r.reason, _ = f["reason"].(string)
			r.context, _ = f["context"].(string)
			r.object, _ = f["object"].(string)
			r.count, _ = f["count"].(int64)
			out = append(out, r)
		}
	}
	return out
}
