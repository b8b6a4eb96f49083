package rueidis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"github.com/bucketry/ratelimit/internal/redisscript"
	"github.com/bucketry/ratelimit/internal/redisscript/redisstore"
)

// rueidisClient is the rueidis side of a Store: the client calls, as
// redisstore.Client, and reads through the client-side cache, as
// redisstore.Cache. It is safe for concurrent use.
type rueidisClient struct {
	client  rueidis.Client
	cluster bool
}

// newClient returns the rueidis side of a store on client.
func newClient(client rueidis.Client, _ *redisstore.Config) redisstore.Client {
	return &rueidisClient{client: client, cluster: client.Mode() == rueidis.ClientModeCluster}
}

// Cluster reports whether the client's Mode is cluster.
func (r *rueidisClient) Cluster() bool { return r.cluster }

// Del deletes key with DEL.
func (r *rueidisClient) Del(ctx context.Context, key string) error {
	return r.client.Do(ctx, r.client.B().Del().Key(key).Build()).Error()
}

// Eval sends one call with Do, several with DoMulti, which rueidis
// pipelines to each node. In Cluster, every key of a call must be in one
// slot (rueidis checks).
func (r *rueidisClient) Eval(ctx context.Context, evals []*redisstore.Eval, full bool) {
	if len(evals) == 1 {
		cmd, err := r.command(evals[0], full)
		if err != nil {
			failed(evals, err)
			return
		}
		read(r.client.Do(ctx, cmd), evals[0])
		return
	}
	cmds := make([]rueidis.Completed, len(evals))
	for i, e := range evals {
		var err error
		if cmds[i], err = r.command(e, full); err != nil {
			failed(evals, err)
			return
		}
	}
	for i, res := range r.client.DoMulti(ctx, cmds...) {
		read(res, evals[i])
	}
}

// failed answers evals, none of them sent, with err.
func failed(evals []*redisstore.Eval, err error) {
	for _, e := range evals {
		e.Reply, e.Undo, e.NoScript, e.Err = "", nil, false, err
	}
}

// command builds EVALSHA sha numkeys keys... args..., or with full EVAL
// with the source, with the arguments, strings in interfaces as
// redisscript.Builder makes them.
func (r *rueidisClient) command(e *redisstore.Eval, full bool) (rueidis.Completed, error) {
	if full {
		return withArgs(r.client.B().Eval().Script(redisscript.Source()).Numkeys(int64(len(e.Keys))).Key(e.Keys...).Arg(), e.Args)
	}
	return withArgs(r.client.B().Evalsha().Sha1(redisscript.SHA()).Numkeys(int64(len(e.Keys))).Key(e.Keys...).Arg(), e.Args)
}

func withArgs[B interface {
	Arg(...string) B
	Build() rueidis.Completed
}](b B, args []any) (rueidis.Completed, error) {
	var arr [8]string
	strs := arr[:0]
	for i, a := range args {
		str, ok := a.(string)
		if !ok {
			return rueidis.Completed{}, fmt.Errorf("ratelimit: script argument %d is %T, want a string", i, a)
		}
		strs = append(strs, str)
	}
	return b.Arg(strs...).Build(), nil
}

// read sets e's reply fields from res: the script's binary string, or for
// a take with undo an array of that string and an array of strings (the
// undo values).
func read(res rueidis.RedisResult, e *redisstore.Eval) {
	e.Reply, e.Undo, e.NoScript, e.Err = "", nil, false, nil
	msg, err := res.ToMessage()
	if err != nil {
		if rueidis.IsRedisNil(err) {
			e.Err = fmt.Errorf("%w: nil, want a string or an array", redisscript.ErrReply)
			return
		}
		re, ok := rueidis.IsRedisErr(err)
		e.Err, e.NoScript = err, ok && re.IsNoScript()
		return
	}
	if msg.IsString() {
		e.Reply, _ = msg.ToString()
		return
	}
	arr, err := msg.ToArray()
	if err != nil {
		e.Err = fmt.Errorf("%w: %v", redisscript.ErrReply, err)
		return
	}
	if len(arr) != 2 {
		e.Err = fmt.Errorf("%w: an array of %d elements, want 2", redisscript.ErrReply, len(arr))
		return
	}
	if !arr[0].IsString() {
		e.Err = fmt.Errorf("%w: first element is not a string", redisscript.ErrReply)
		return
	}
	if !arr[1].IsArray() {
		e.Err = fmt.Errorf("%w: second element is not an array", redisscript.ErrReply)
		return
	}
	reply, _ := arr[0].ToString()
	u, _ := arr[1].ToArray()
	undo := make([]string, len(u))
	for i := range u {
		if !u[i].IsString() {
			e.Err = fmt.Errorf("%w: undo value %d is not a string", redisscript.ErrReply, i)
			return
		}
		undo[i], _ = u[i].ToString()
	}
	e.Reply, e.Undo = reply, undo
}

// Get reads keys with DoCache, several with DoMultiCache, asking the
// client-side cache to keep each value for ttl at most.
func (r *rueidisClient) Get(ctx context.Context, keys []string, ttl time.Duration, vals []redisstore.Cached) {
	if len(keys) == 1 {
		cached(r.client.DoCache(ctx, r.client.B().Get().Key(keys[0]).Cache(), ttl), &vals[0])
		return
	}
	multi := make([]rueidis.CacheableTTL, len(keys))
	for i, k := range keys {
		multi[i] = rueidis.CT(r.client.B().Get().Key(k).Cache(), ttl)
	}
	for i, res := range r.client.DoMultiCache(ctx, multi...) {
		cached(res, &vals[i])
	}
}

// cached sets v from res: a string, or nil for an absent key. Any other
// reply is an error wrapping redisscript.ErrReply.
func cached(res rueidis.RedisResult, v *redisstore.Cached) {
	*v = redisstore.Cached{Hit: res.IsCacheHit()}
	msg, err := res.ToMessage()
	switch {
	case rueidis.IsRedisNil(err):
		v.Absent = true
	case err != nil:
		v.Err = err
	case !msg.IsString():
		v.Err = fmt.Errorf("%w: bucket state is not a string", redisscript.ErrReply)
	default:
		if v.Value, err = msg.ToString(); err != nil {
			v.Err = fmt.Errorf("%w: %v", redisscript.ErrReply, err)
		}
	}
}

func (r *rueidisClient) Slots(ctx context.Context) ([]redisstore.SlotRange, error) {
	msg, err := r.client.Do(ctx, r.client.B().ClusterSlots().Build()).ToMessage()
	if err != nil {
		return nil, err
	}
	ranges, err := msg.ToArray()
	if err != nil {
		return nil, fmt.Errorf("%w: CLUSTER SLOTS: %v", redisscript.ErrReply, err)
	}
	out := make([]redisstore.SlotRange, 0, len(ranges))
	for _, rg := range ranges {
		f, err := rg.ToArray()
		if err != nil || len(f) < 3 {
			return nil, fmt.Errorf("%w: CLUSTER SLOTS: a range is not [first, last, master, ...]", redisscript.ErrReply)
		}
		first, err1 := f[0].AsInt64()
		last, err2 := f[1].AsInt64()
		node, err3 := f[2].ToArray()
		if err := errors.Join(err1, err2, err3); err != nil || len(node) < 2 {
			return nil, fmt.Errorf("%w: CLUSTER SLOTS: malformed range", redisscript.ErrReply)
		}
		host, err1 := node[0].ToString()
		port, err2 := node[1].AsInt64()
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("%w: CLUSTER SLOTS: malformed node", redisscript.ErrReply)
		}
		out = append(out, redisstore.SlotRange{First: int(first), Last: int(last), Master: net.JoinHostPort(host, strconv.FormatInt(port, 10))})
	}
	return out, nil
}

func (r *rueidisClient) Ping(ctx context.Context) error {
	if !r.cluster {
		return r.client.Do(ctx, r.client.B().Ping().Build()).Error()
	}
	for _, c := range r.client.Nodes() {
		if err := c.Do(ctx, c.B().Ping().Build()).Error(); err != nil {
			return err
		}
	}
	return nil
}

// AutoPipelines reports that rueidis merges concurrent calls to a node into
// one round trip by itself.
func (r *rueidisClient) AutoPipelines() bool { return true }
