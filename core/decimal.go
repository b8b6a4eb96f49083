package core

import (
	"encoding/binary"
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
// 10) does. Where dst has room for 16 more bytes it writes the digits in
// place, eight at a time (eightDigits), and may then write up to 16 bytes
// past them within dst's capacity, which an append may overwrite anyway;
// otherwise (or above 16 digits) four at a time from the last. The leading
// zeros of the first eight are counted in the digits themselves
// (leadingZeroDigits), not from u's magnitude.
func appendDecimal(dst []byte, n int64) []byte {
	switch {
	case n < 0:
		return strconv.AppendInt(dst, n, 10)
	case n < 10:
		// Small numbers (RateLimit's t, a small Remaining) skip the
		// digit count.
		return append(dst, byte('0'+n))
	case n < 100:
		p := &digitPairs[n]
		return append(dst, p[0], p[1])
	}
	start := len(dst)
	if n >= 1e16 || cap(dst)-start < 16 {
		return appendDecimalSlow(dst, uint64(n))
	}
	u := uint64(n)
	room := dst[start : start+16 : start+16]
	if u < 1e8 {
		// The eight digits of u shifted down past its leading zeros,
		// which are the low bytes.
		w, z := leadingZeroDigits(eightDigits(uint32(u)))
		binary.LittleEndian.PutUint64(room, w)
		return dst[:start+8-z]
	}
	hi, lo := u/1e8, uint32(u%1e8) // hi below 1e8
	w, z := leadingZeroDigits(eightDigits(uint32(hi)))
	binary.LittleEndian.PutUint64(room, w)
	binary.LittleEndian.PutUint64(room[8-z:], eightDigits(lo))
	return dst[:start+16-z]
}

// eightDigits returns the eight decimal digits of x, below 1e8, with
// leading zeros, as ASCII in the bytes of a little-endian word, the first
// digit lowest. It divides every lane of the word at once: x's two halves
// of four digits in 32-bit lanes split by 100 into four 16-bit lanes, each
// split by 10 into bytes. A division by 100 of a lane below 10,000 is
// exact as (v*10486)>>20, and by 10 of one below 100 as (v*103)>>10 (the
// error of the multiplier is below the fraction a quotient can have);
// no lane's product reaches the next lane.
func eightDigits(x uint32) uint64 {
	z := uint64(x/10000) | uint64(x%10000)<<32
	hundreds := (z * 10486) >> 20 & 0x0000007f_0000007f
	w := hundreds | (z-hundreds*100)<<16
	tens := (w * 103) >> 10 & 0x000f_000f_000f_000f
	return tens | (w-tens*10)<<8 | 0x30303030_30303030
}

// leadingZeroDigits returns w, eight digits as eightDigits returns them,
// shifted down past its leading zeros, and how many there were: the low
// bytes that are '0', found as the trailing zero bits of w with '0' taken
// from each byte. w must hold a digit other than 0.
func leadingZeroDigits(w uint64) (uint64, int) {
	z := bits.TrailingZeros64(w^0x30303030_30303030) / 8
	return w >> (8 * z), z
}

// appendDecimalSlow is appendDecimal for u of 100 or more where dst has
// less room than appendDecimal writes, or u has more than 16 digits: the
// digits four at a time from the last, in place where dst has room.
func appendDecimalSlow(dst []byte, u uint64) []byte {
	k := decimalLen(u)
	start := len(dst)
	if cap(dst)-start < k {
		dst = append(dst, make([]byte, k)...)
	} else {
		dst = dst[:start+k]
	}
	out := dst[start : start+k]
	i := k
	for u >= 10000 {
		// Four digits at a time: one 64-bit division, the rest in 32 bits.
		q := u / 10000
		r := uint32(u - q*10000)
		u = q
		i -= 4
		b := out[i : i+4 : i+4]
		hi, lo := &digitPairs[r/100], &digitPairs[r%100]
		b[0], b[1], b[2], b[3] = hi[0], hi[1], lo[0], lo[1]
	}
	if u >= 100 {
		p := &digitPairs[u%100]
		u /= 100
		i -= 2
		b := out[i : i+2 : i+2]
		b[0], b[1] = p[0], p[1]
	}
	if u >= 10 {
		p := &digitPairs[u]
		out[0], out[1] = p[0], p[1]
	} else {
		out[0] = byte('0' + u)
	}
	return dst
}
