//go:build !unix

package redistest

import "os"

// Without Unix signals Pause and Resume do nothing; redis-server does not
// run there anyway.
var (
	sigStop os.Signal
	sigCont os.Signal
)
