// Package ratelimittest runs the ratelimit command, built from the
// workspace, against a real redis-server: a test module, so that the
// command's own module requires no test harness.
package ratelimittest
