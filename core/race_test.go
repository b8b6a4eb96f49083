//go:build race

package core

// raceEnabled: the race detector is on, and sync.Pool drops items at random.
const raceEnabled = true
