package ginlimit

import (
	"unsafe"

	"github.com/gin-gonic/gin"

	"github.com/bucketry/ratelimit/core"
)

// PassesHeld returns how many requests the gin middlewares over l record
// as let through, their chains running, and how many middlewares the
// limiter's list holds, collected ones included.
func PassesHeld(l *core.Limiter) (held, listed int) {
	s := siblingsOf(l, false)
	if s == nil {
		return 0, 0
	}
	list := *s.list.Load()
	for _, w := range list {
		m := w.Value()
		if m == nil {
			continue
		}
		for i := range m.passes.slots {
			if m.passes.slots[i].Load() != 0 {
				held++
			}
		}
		held += int(m.passes.nover.Load())
	}
	return held, len(list)
}

// Passes is the record of requests a middleware keeps, for its own tests.
type Passes struct{ p *passes }

func NewPasses() *Passes { return &Passes{newPasses()} }

func (p *Passes) Has(c *gin.Context) bool       { return p.p.has(c) }
func (p *Passes) Add(c *gin.Context) int        { return p.p.add(c) }
func (p *Passes) Remove(c *gin.Context, at int) { p.p.remove(c, at) }
func (p *Passes) Over() int64                   { return p.p.nover.Load() }

// Group returns the index of c's first slot.
func Group(c *gin.Context) int { return group(addr(c)) }

const PassGroup, Overflowed = passGroup, overflowed

// madePasses keeps what SlotsAligned made on the heap, where a
// middleware's are.
var madePasses []*passes

// SlotsAligned reports whether the slots of a record made as a
// middleware's are begin a cache line.
func SlotsAligned() bool {
	p := newPasses()
	madePasses = append(madePasses[:0], p)
	return uintptr(unsafe.Pointer(&p.slots[0]))%64 == 0
}
