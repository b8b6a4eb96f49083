//go:build !unix

package main

import "os"

// terminate stops p: without SIGTERM, by killing it.
func terminate(p *os.Process) { p.Kill() }
