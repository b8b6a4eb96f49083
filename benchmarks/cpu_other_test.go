//go:build !unix

package benchmarks

import "time"

// processCPU returns 0: this platform has no getrusage.
func processCPU() time.Duration { return 0 }
