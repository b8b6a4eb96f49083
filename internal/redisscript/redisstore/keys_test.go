package redisstore

import (
	"slices"
	"strconv"
	"testing"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/internal/redisscript"
)

// TestBuildKeys: a take's keys, built into one string, are each bucket's
// key, and that string is joinKeys of them, however many buckets; a reused
// takeReq leaves earlier keys intact.
func TestBuildKeys(t *testing.T) {
	k, err := redisscript.NewKeys("rl", false, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := new(takeReq)
	var kept [][]string
	for _, n := range []int{1, 3, 6, 2} {
		buckets := make([]core.Bucket, n)
		want := make([]string, n)
		for i := range buckets {
			buckets[i] = core.Bucket{Rule: "rule" + strconv.Itoa(i), Key: "user{" + strconv.Itoa(n) + "}"}
			want[i] = k.Key(buckets[i].Rule, buckets[i].Key)
		}
		keys, joined := r.buildKeys(k, buckets)
		if !slices.Equal(keys, want) || joined != joinKeys(want) {
			t.Fatalf("%d buckets: keys %q joined %q, want %q and %q", n, keys, joined, want, joinKeys(want))
		}
		kept = append(kept, slices.Clone(keys))
	}
	if kept[0][0] != "rl:rule0:user%7B1%7D" {
		t.Errorf("a key built earlier changed to %q", kept[0][0])
	}
	if n := testing.AllocsPerRun(100, func() {
		r.buildKeys(k, []core.Bucket{{Rule: "a", Key: "u"}, {Rule: "b", Key: "u"}, {Rule: "c", Key: "u"}})
	}); n != 1 {
		t.Errorf("buildKeys of 3 buckets: %v allocations, want 1", n)
	}
}
