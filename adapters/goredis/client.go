package goredis

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/bucketry/ratelimit/internal/redisscript"
	"github.com/bucketry/ratelimit/internal/redisscript/redisstore"
)

// goRedis is the go-redis side of a Store: the client calls, as
// redisstore.Client. It is safe for concurrent use.
type goRedis struct {
	client  redis.UniversalClient
	cluster bool
}

// Cluster reports whether client is a *redis.ClusterClient.
func (g *goRedis) Cluster() bool { return g.cluster }

// Del deletes key with DEL.
func (g *goRedis) Del(ctx context.Context, key string) error { return g.client.Del(ctx, key).Err() }

// Eval sends one call with EvalSha or Eval, several in a pipeline, which a
// ClusterClient splits by node.
func (g *goRedis) Eval(ctx context.Context, evals []*redisstore.Eval, full bool) {
	if len(evals) == 1 {
		read(g.eval(ctx, g.client, evals[0], full), evals[0])
		return
	}
	c, ok := g.client.(*redis.ClusterClient)
	if !ok {
		g.pipeline(ctx, evals, full)
		return
	}
	// One pipeline per node, concurrently: when a Cluster pipeline runs out
	// of time retrying a dead node, go-redis sets its error on every command
	// of the pipeline, those that ran on healthy nodes included, whose
	// results (tokens taken, to be given back) would then be lost.
	var order []string
	byNode := map[string][]*redisstore.Eval{}
	for i, e := range evals {
		node := strconv.Itoa(i) // alone, if its node is not known
		if m, err := c.MasterForKey(ctx, e.Keys[0]); err == nil {
			node = m.Options().Addr
		}
		if _, seen := byNode[node]; !seen {
			order = append(order, node)
		}
		byNode[node] = append(byNode[node], e)
	}
	if len(order) == 1 {
		g.pipeline(ctx, evals, full)
		return
	}
	var wg sync.WaitGroup
	for _, node := range order[1:] {
		wg.Go(func() { g.pipeline(ctx, byNode[node], full) })
	}
	g.pipeline(ctx, byNode[order[0]], full)
	wg.Wait()
}

// pipeline sends evals in one pipeline and reads each reply.
func (g *goRedis) pipeline(ctx context.Context, evals []*redisstore.Eval, full bool) {
	if len(evals) == 1 {
		read(g.eval(ctx, g.client, evals[0], full), evals[0])
		return
	}
	pipe := g.client.Pipeline()
	cmds := make([]*redis.Cmd, len(evals))
	for i, e := range evals {
		cmds[i] = g.eval(ctx, pipe, e, full)
	}
	_, _ = pipe.Exec(ctx) // each command's error is read below
	for i, e := range evals {
		read(cmds[i], e)
	}
}

func (g *goRedis) eval(ctx context.Context, c redis.Scripter, e *redisstore.Eval, full bool) *redis.Cmd {
	if full {
		return c.Eval(ctx, redisscript.Source(), e.Keys, e.Args...)
	}
	return c.EvalSha(ctx, redisscript.SHA(), e.Keys, e.Args...)
}

// read sets e's reply fields from cmd: the script's binary string, or for
// a take with undo an array of that string and an array of strings (the
// undo values).
func read(cmd *redis.Cmd, e *redisstore.Eval) {
	e.Reply, e.Undo, e.NoScript, e.Err = "", nil, false, nil
	v, err := cmd.Result()
	switch {
	case err == redis.Nil:
		e.Err = fmt.Errorf("%w: %w", redisscript.ErrReply, err)
		return
	case err != nil:
		e.Err, e.NoScript = err, redis.HasErrorPrefix(err, "NOSCRIPT")
		return
	}
	if reply, ok := v.(string); ok {
		e.Reply = reply
		return
	}
	arr, ok := v.([]any)
	if !ok || len(arr) != 2 {
		e.Err = fmt.Errorf("%w: %T of %d elements, want a string or an array of 2", redisscript.ErrReply, v, len(arr))
		return
	}
	reply, ok := arr[0].(string)
	if !ok {
		e.Err = fmt.Errorf("%w: first element is %T, want a string", redisscript.ErrReply, arr[0])
		return
	}
	u, ok := arr[1].([]any)
	if !ok {
		e.Err = fmt.Errorf("%w: second element is %T, want an array", redisscript.ErrReply, arr[1])
		return
	}
	undo := make([]string, len(u))
	for i, x := range u {
		if undo[i], ok = x.(string); !ok {
			e.Err = fmt.Errorf("%w: undo value %d is %T, want a string", redisscript.ErrReply, i, x)
			return
		}
	}
	e.Reply, e.Undo = reply, undo
}

// Slots also asks a ClusterClient to reload its own slot map: it learns a
// new owner from MOVED replies, which a dead master never sends, or once its
// map is older than ClusterStateReloadInterval (a minute by default), so
// that without this a failed-over master's keys would stay unavailable long
// after the promotion.
func (g *goRedis) Slots(ctx context.Context) ([]redisstore.SlotRange, error) {
	if c, ok := g.client.(*redis.ClusterClient); ok {
		c.ReloadState(ctx)
	}
	slots, err := g.client.ClusterSlots(ctx).Result()
	if err != nil {
		return nil, err
	}
	out := make([]redisstore.SlotRange, 0, len(slots))
	for _, s := range slots {
		if len(s.Nodes) == 0 {
			continue
		}
		out = append(out, redisstore.SlotRange{First: s.Start, Last: s.End, Master: s.Nodes[0].Addr})
	}
	return out, nil
}

func (g *goRedis) Ping(ctx context.Context) error {
	if c, ok := g.client.(*redis.ClusterClient); ok {
		return c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return m.Ping(ctx).Err() })
	}
	return g.client.Ping(ctx).Err()
}
