package proctest

import "sync"

// Cleanups collects the stop functions of what one test started: a
// harness registers its Run with t.Cleanup, or returns it as the stop
// function of a start without a test. The zero value is ready to use. It is
// safe for concurrent use.
type Cleanups struct {
	mu  sync.Mutex
	fns []func()
}

// Add registers f to be called by the next Run.
func (c *Cleanups) Add(f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fns = append(c.fns, f)
}

// Run calls every function added since the last Run, all at once (a
// cluster's nodes stop in one grace period, not one each), and returns
// when they have all returned. A second Run calls only what was added
// since.
func (c *Cleanups) Run() {
	c.mu.Lock()
	fns := c.fns
	c.fns = nil
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, f := range fns {
		wg.Go(f)
	}
	wg.Wait()
}
