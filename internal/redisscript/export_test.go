package redisscript

import (
	"unsafe"

	"github.com/bucketry/ratelimit/core"
)

// cachedLimitArgs counts the entries of the limit argument caches: the map
// and the occupied slots in front of it.
func cachedLimitArgs() (mapped, recent int) {
	limitArgs.Range(func(any, any) bool {
		mapped++
		return true
	})
	for i := range recentArgs {
		if recentArgs[i].Load() != nil {
			recent++
		}
	}
	return mapped, recent
}

// plantLimitArgs makes the caches hold, at l's address, the arguments of
// other, as if a dead limit of that value had lived there and its cleanup
// had not run yet.
func plantLimitArgs(l *core.Limit, other core.Limit) {
	addr := uintptr(unsafe.Pointer(l))
	e := &argsEntry{addr: addr, limit: other, args: [5]any{"stale", "stale", "stale", "stale", "stale"}}
	limitArgs.Store(addr, e)
	recentSlot(addr).Store(e)
}
