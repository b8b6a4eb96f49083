//go:build !unix

package proctest

import "os"

// Without Unix signals, stopping kills at once.
var (
	sigTerm os.Signal = os.Kill
	sigCont os.Signal
)

// holdPort holds nothing where the servers do not run.
func holdPort(int) (func(), error) { return func() {}, nil }
