// Package crc computes the CRC32C (Castagnoli) checksums chunkup records per chunk and,
// by combining them, for a whole object without reading it again.
package crc

import (
	"hash"
	"hash/crc32"
)

// Table is the Castagnoli table; the standard library uses SSE4.2/ARM64 instructions
// for it.
var Table = crc32.MakeTable(crc32.Castagnoli)

// Checksum returns the CRC32C of b.
func Checksum(b []byte) uint32 { return crc32.Checksum(b, Table) }

// New returns a running CRC32C.
func New() hash.Hash32 { return crc32.New(Table) }

// castagnoliPoly is the reversed Castagnoli polynomial.
const castagnoliPoly = 0x82f63b78

// Combine returns the CRC32C of A||B given crcA = CRC32C(A), crcB = CRC32C(B) and
// lenB = len(B). It follows zlib's crc32_combine (1.2.12 and later): appending lenB zero
// bytes to A multiplies its CRC register by x^(8·lenB) modulo the polynomial, made from
// a table of x^(2^k) in O(log lenB) multiplications of 32 steps each (the matrix
// squaring of older zlib took fifty times as long, a tenth of the server's work for a
// direct upload of many parts).
func Combine(crcA, crcB uint32, lenB int64) uint32 {
	if lenB <= 0 {
		return crcA
	}
	if crcA == 0 {
		// The shift below is linear in crcA: zero stays zero. Every running checksum
		// starts there, and most objects are one piece.
		return crcB
	}
	return multModP(xPow8n(lenB), crcA) ^ crcB
}

// x2k[k] is x^(2^k) modulo the polynomial (reflected: x^0 is the top bit), for every k
// xPow8n needs: 3 (a byte is 2^3 bits) to 3+62. (The powers do not repeat with period
// 32 for this polynomial, so the table cannot wrap around as zlib's does for its own.)
var x2k = func() (t [66]uint32) {
	p := uint32(1) << 30 // x^1
	for k := range t {
		t[k] = p
		p = multModP(p, p)
	}
	return t
}()

// multModP is a(x)·b(x) modulo the polynomial, both reflected.
func multModP(a, b uint32) uint32 {
	var p uint32
	for m := uint32(1) << 31; m != 0; m >>= 1 {
		if a&m != 0 {
			p ^= b
			if a&(m-1) == 0 {
				break
			}
		}
		if b&1 != 0 {
			b = b>>1 ^ castagnoliPoly
		} else {
			b >>= 1
		}
	}
	return p
}

// xPow8n is x^(8n) modulo the polynomial: n zero bytes.
func xPow8n(n int64) uint32 {
	p := uint32(1) << 31 // x^0
	for k := 3; n != 0; n, k = n>>1, k+1 {
		if n&1 != 0 {
			p = multModP(x2k[k], p)
		}
	}
	return p
}
