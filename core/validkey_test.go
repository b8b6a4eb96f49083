package core

import (
	"strings"
	"testing"
)

// simpleValidKey is validKey a byte at a time, as CheckKey checks.
func simpleValidKey(key string) bool { return CheckKey(key) == nil }

// TestValidKeyWords checks validKey's eight bytes at a time against
// CheckKey's one at a time: every byte value at every position of keys of
// 1 to 24 bytes over several fillers, and every pair of edge values (where
// a borrow from one byte could be taken for another) at every two
// positions of a 16-byte key.
func TestValidKeyWords(t *testing.T) {
	check := func(key string) {
		t.Helper()
		if got, want := validKey(key), simpleValidKey(key); got != want {
			t.Fatalf("validKey(%q) = %v, CheckKey says %v", key, got, want)
		}
		if key != "" && (validShort(key) || validKey(key)) != validKey(key) {
			t.Fatalf("validShort(%q) = %v, validKey %v", key, validShort(key), validKey(key))
		}
	}
	fillers := []byte{'a', 0x20, 0x21, 0x7e, 0x80, 0xa0, 0xff}
	for _, f := range fillers {
		for n := 1; n <= 24; n++ {
			b := []byte(strings.Repeat(string(f), n))
			for i := range n {
				for c := range 256 {
					b[i] = byte(c)
					check(string(b))
				}
				b[i] = f
			}
		}
	}
	edges := []byte{0x00, 0x01, 0x1f, 0x20, 0x21, 0x7e, 0x7f, 0x80, 0x9f, 0xa0, 0xff}
	for _, f := range fillers {
		b := []byte(strings.Repeat(string(f), 16))
		for i := range b {
			for j := i + 1; j < len(b); j++ {
				for _, x := range edges {
					for _, y := range edges {
						b[i], b[j] = x, y
						check(string(b))
					}
				}
				b[i], b[j] = f, f
			}
		}
	}
	check("")
	check(strings.Repeat("k", MaxKeyLen))
	check(strings.Repeat("k", MaxKeyLen+1))
}

func FuzzValidKey(f *testing.F) {
	for _, s := range []string{"user:1", "GET /items/{id}", "a\x7fb", "\x1f", "0123456789abcdef\x00", "192.0.2.7"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		if got, want := validKey(key), simpleValidKey(key); got != want {
			t.Fatalf("validKey(%q) = %v, CheckKey says %v", key, got, want)
		}
	})
}
