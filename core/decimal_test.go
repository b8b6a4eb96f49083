package core

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
)

// decimalCases are the integers where a digit count or a digit pair
// changes, and both ends of int64.
func decimalCases() []int64 {
	cases := []int64{0, 1, 9, 10, 11, 99, 100, 101, math.MaxInt64, math.MaxInt64 - 1, -1, -10, math.MinInt64}
	for p := int64(1); p <= math.MaxInt64/10; p *= 10 {
		cases = append(cases, p-1, p, p+1, 10*p-1, -p)
	}
	for s := range 63 {
		p := int64(1) << s
		cases = append(cases, p-1, p, p+1)
	}
	return cases
}

func TestAppendDecimal(t *testing.T) {
	check := func(n int64) {
		t.Helper()
		want := strconv.AppendInt([]byte("x="), n, 10)
		// Room to write in place, and none: both must give the same bytes.
		roomy := append(make([]byte, 0, 64), "x="...)
		if got := appendDecimal(roomy, n); string(got) != string(want) {
			t.Fatalf("appendDecimal(%d) with room = %q, want %q", n, got, want)
		}
		if got := appendDecimal([]byte("x="), n); string(got) != string(want) {
			t.Fatalf("appendDecimal(%d) growing = %q, want %q", n, got, want)
		}
		if n >= 0 {
			if got, want := decimalLen(uint64(n)), len(strconv.FormatInt(n, 10)); got != want {
				t.Fatalf("decimalLen(%d) = %d, want %d", n, got, want)
			}
		}
	}
	for _, n := range decimalCases() {
		check(n)
	}
	for n := int64(0); n < 100_000; n++ {
		check(n)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 200_000 {
		// Every bit length equally often.
		check(r.Int64() >> r.IntN(64))
	}
}

// TestEightDigits checks eightDigits against strconv: every value of each
// four-digit half with the other half fixed (its lanes never carry into
// each other), and random values.
func TestEightDigits(t *testing.T) {
	check := func(x uint32) {
		t.Helper()
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], eightDigits(x))
		if want := fmt.Sprintf("%08d", x); string(b[:]) != want {
			t.Fatalf("eightDigits(%d) = %q, want %q", x, b[:], want)
		}
	}
	for v := range uint32(10_000) {
		check(v*10_000 + 1234)
		check(5678*10_000 + v)
		check(v * 10_001)
	}
	r := rand.New(rand.NewPCG(3, 4))
	for range 100_000 {
		check(r.Uint32N(100_000_000))
	}
	check(99_999_999)
}

// TestAppendDecimalInPlace checks that a value with room is written in
// the buffer given, which HeaderValues.commit relies on to keep it inline.
func TestAppendDecimalInPlace(t *testing.T) {
	buf := make([]byte, 3, 32)
	got := appendDecimal(buf, 1234567890)
	if &got[0] != &buf[0] || string(got[3:]) != "1234567890" {
		t.Fatalf("appendDecimal moved or mangled the value: %q", got[3:])
	}
	if allocs := testing.AllocsPerRun(100, func() { appendDecimal(buf[:3], math.MaxInt64) }); allocs != 0 {
		t.Fatalf("appendDecimal with room allocated %v times", allocs)
	}
}

func FuzzAppendDecimal(f *testing.F) {
	for _, n := range decimalCases() {
		f.Add(n)
	}
	f.Fuzz(func(t *testing.T, n int64) {
		if got, want := appendDecimal(nil, n), strconv.AppendInt(nil, n, 10); string(got) != string(want) {
			t.Fatalf("appendDecimal(%d) = %q, want %q", n, got, want)
		}
	})
}
