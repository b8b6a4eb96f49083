package redisstore

import (
	"context"
	"reflect"
	"time"
)

// Client is what a Store needs of a Redis client: the calls, none of the
// decisions. Implementations must be safe for concurrent use.
type Client interface {
	// Cluster reports whether the client talks to a Redis Cluster, whose
	// keys must be grouped by hash slot.
	Cluster() bool
	// Eval sends the script calls evals in one round trip (one call may go
	// alone), each to the node serving its keys' hash slot (the keys of one
	// call share a slot): EVALSHA of redisscript.SHA, or with full, EVAL of
	// redisscript.Source. It sets every reply field of every call, and
	// keeps none of them once it returns.
	Eval(ctx context.Context, evals []*Eval, full bool)
	// Del deletes key and returns the client's error, unwrapped.
	Del(ctx context.Context, key string) error
	// Slots returns the Cluster's slot map (CLUSTER SLOTS): each range of
	// slots and its master's address. Only called in Cluster.
	Slots(ctx context.Context) ([]SlotRange, error)
	// Ping checks that Redis answers (every Cluster master, in Cluster),
	// returning the client's error, unwrapped.
	Ping(ctx context.Context) error
}

// Eval is one script call: its arguments, as redisscript.Builder encodes
// them, and the reply's fields, which Client.Eval sets.
type Eval struct {
	Keys []string // KEYS
	Args []any    // ARGV, strings in interfaces

	// Reply is the script's binary string (see redisscript.Decode): the
	// reply, or its first element when the reply is an array of two, the
	// reply of a take with undo, whose second element, an array, Undo
	// holds the strings of (the before and written values); otherwise
	// Undo is nil.
	Reply string
	Undo  []string
	// NoScript reports that Redis answered NOSCRIPT: the node does not
	// have the script, which is then sent in full.
	NoScript bool
	// Err is the call's failure as the client reports it, or an error
	// wrapping redisscript.ErrReply for a reply that is neither a string
	// nor an array of a string and an array of strings (a nil reply
	// included).
	Err error
}

// Cache is implemented by a Client with client-side caching (RESP3
// tracking, as rueidis has): Redis invalidates a cached copy the moment any
// client writes its key. A Store on such a client denies locally from
// bucket state read through the cache; on any other, from remembered
// denials. See the adapters' package documentation for both.
type Cache interface {
	// Get reads keys through the client-side cache, in one round trip at
	// most, asking it to keep each value for ttl at most, and sets vals[i]
	// for keys[i], keeping none of them once it returns. len(vals) ==
	// len(keys).
	Get(ctx context.Context, keys []string, ttl time.Duration, vals []Cached)
}

// Cached is a value read through a Cache.
type Cached struct {
	Value  string // the key's value
	Absent bool   // the key does not exist
	Hit    bool   // served from the client-side cache, without a round trip
	// Err is the client's error, unwrapped, or an error wrapping
	// redisscript.ErrReply for a value that is not a string.
	Err error
}

// IsNil reports whether v is nil or holds a nil pointer, map, slice,
// channel, function or interface: a nil client or clock in an interface
// must be refused, not called.
func IsNil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Chan, reflect.Func, reflect.Interface:
		return rv.IsNil()
	}
	return false
}
