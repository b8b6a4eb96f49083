//go:build !unix

package redistest

import "os"

// Without Unix signals, stopping kills at once and Pause and Resume do
// nothing; redis-server does not run there anyway.
var (
	sigTerm os.Signal = os.Kill
	sigStop os.Signal
	sigCont os.Signal
)
