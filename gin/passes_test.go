package ginlimit_test

import (
	"sync"
	"testing"

	"github.com/gin-gonic/gin"

	ginlimit "github.com/bucketry/ratelimit/gin"
)

// sameGroup returns n contexts whose first slot is the same.
func sameGroup(t *testing.T, n int) []*gin.Context {
	t.Helper()
	byGroup := map[int][]*gin.Context{}
	for range 1 << 16 {
		c := new(gin.Context)
		g := ginlimit.Group(c)
		byGroup[g] = append(byGroup[g], c)
		if len(byGroup[g]) == n {
			return byGroup[g]
		}
	}
	t.Fatalf("no %d of 65536 contexts share a group", n)
	return nil
}

// TestPassesOverflow: a group takes passGroup requests; the others go to
// the map, and every one is found until it is removed, in any order.
func TestPassesOverflow(t *testing.T) {
	cs := sameGroup(t, 3*ginlimit.PassGroup)
	p := ginlimit.NewPasses()
	at := make([]int, len(cs))
	for i, c := range cs {
		if p.Has(c) {
			t.Fatalf("context %d found before it was added", i)
		}
		at[i] = p.Add(c)
		if (at[i] == ginlimit.Overflowed) != (i >= ginlimit.PassGroup) {
			t.Errorf("context %d added at %d; want a slot for the first %d of a group, then the map", i, at[i], ginlimit.PassGroup)
		}
	}
	if n := p.Over(); n != int64(len(cs)-ginlimit.PassGroup) {
		t.Errorf("%d in the map, want %d", n, len(cs)-ginlimit.PassGroup)
	}
	// Every other one, from the end, then the rest.
	for _, odd := range []int{1, 0} {
		for i := len(cs) - 1; i >= 0; i-- {
			if i%2 == odd {
				p.Remove(cs[i], at[i])
			}
		}
		for i, c := range cs {
			if removed := i%2 == 1 || odd == 0; p.Has(c) == removed {
				t.Errorf("context %d: found %v, want %v", i, !removed, removed)
			}
		}
	}
	if n := p.Over(); n != 0 {
		t.Errorf("%d left in the map, want 0", n)
	}
	// A slot freed takes a request again rather than the map.
	if at := p.Add(cs[len(cs)-1]); at == ginlimit.Overflowed {
		t.Error("added to the map with the group's slots free")
	}
}

// TestPassesConcurrent: goroutines adding and removing requests of one
// group at once, in slots and in the map, each always finds its own
// request while it is recorded and never after.
func TestPassesConcurrent(t *testing.T) {
	const goroutines = 4 * ginlimit.PassGroup
	cs := sameGroup(t, goroutines)
	p := ginlimit.NewPasses()
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Go(func() {
			for range 2000 {
				at := p.Add(c)
				if !p.Has(c) {
					t.Error("a request recorded is not found")
					return
				}
				p.Remove(c, at)
				if p.Has(c) {
					t.Error("a request removed is found")
					return
				}
			}
		})
	}
	wg.Wait()
	if n := p.Over(); n != 0 {
		t.Errorf("%d left in the map, want 0", n)
	}
}

// TestSlotsAligned: a group of slots is one cache line.
func TestSlotsAligned(t *testing.T) {
	for range 100 {
		if !ginlimit.SlotsAligned() {
			t.Fatal("a middleware's slots do not begin a cache line")
		}
	}
}
