package core

import (
	"math/bits"
	"strconv"
)

// digitPairs holds the two digits of 0 to 99, "00" to "99".
var digitPairs = func() (p [100][2]byte) {
	for i := range p {
		p[i] = [2]byte{byte('0' + i/10), byte('0' + i%10)}
	}
	return p
}()

// powersOf10 holds 10^0 to 10^19.
var powersOf10 = func() (p [20]uint64) {
	p[0] = 1
	for i := 1; i < len(p); i++ {
		p[i] = p[i-1] * 10
	}
	return p
}()

// decimalLen returns how many decimal digits u has (1 for 0).
func decimalLen(u uint64) int {
	// log10(2) is about 1233/4096: this is the digit count of the
	// smallest number of u's bit length, one short for the larger ones.
	k := bits.Len64(u) * 1233 >> 12
	if u >= powersOf10[k] {
		k++
	}
	return max(k, 1)
}

// appendDecimal appends n in decimal to dst, as strconv.AppendInt(dst, n,
// 10) does. It writes the digits in place, two at a time from the last,
// where dst has room for them, rather than formatting them elsewhere and
// copying them: the three integers of a response's header values (9, 10
// and up to 3 digits in the middleware benchmarks) cost 441 instructions
// here, 587 through strconv.AppendInt.
func appendDecimal(dst []byte, n int64) []byte {
	if n < 0 {
		return strconv.AppendInt(dst, n, 10)
	}
	u := uint64(n)
	k := decimalLen(u)
	start := len(dst)
	if cap(dst)-start < k {
		dst = append(dst, make([]byte, k)...)
	} else {
		dst = dst[:start+k]
	}
	out := dst[start : start+k]
	i := k
	for u >= 100 {
		p := &digitPairs[u%100] // u%100, not u-q*100: the compiler knows it is in range
		u /= 100
		i -= 2
		out[i], out[i+1] = p[0], p[1]
	}
	if u >= 10 {
		p := &digitPairs[u]
		out[0], out[1] = p[0], p[1]
	} else {
		out[0] = byte('0' + u)
	}
	return dst
}
