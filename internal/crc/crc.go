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
// lenB = len(B). It follows zlib's crc32_combine: appending lenB zero bytes to A is a
// linear map on the CRC register, applied by repeated squaring of the one-zero-bit
// operator, in O(log lenB).
func Combine(crcA, crcB uint32, lenB int64) uint32 {
	if lenB <= 0 {
		return crcA
	}
	if crcA == 0 {
		// The shift below is linear in crcA: zero stays zero. Every running checksum
		// starts there, and most objects are one piece, so skip building the operator.
		return crcB
	}
	var even, odd [32]uint32
	odd[0] = castagnoliPoly // operator for one zero bit
	row := uint32(1)
	for n := 1; n < 32; n++ {
		odd[n] = row
		row <<= 1
	}
	gf2Square(&even, &odd) // two zero bits
	gf2Square(&odd, &even) // four zero bits
	for {
		gf2Square(&even, &odd) // first pass: one zero byte
		if lenB&1 != 0 {
			crcA = gf2Times(&even, crcA)
		}
		lenB >>= 1
		if lenB == 0 {
			break
		}
		gf2Square(&odd, &even)
		if lenB&1 != 0 {
			crcA = gf2Times(&odd, crcA)
		}
		lenB >>= 1
		if lenB == 0 {
			break
		}
	}
	return crcA ^ crcB
}

func gf2Times(mat *[32]uint32, vec uint32) uint32 {
	var sum uint32
	for i := 0; vec != 0; i, vec = i+1, vec>>1 {
		if vec&1 != 0 {
			sum ^= mat[i]
		}
	}
	return sum
}

func gf2Square(square, mat *[32]uint32) {
	for n := 0; n < 32; n++ {
		square[n] = gf2Times(mat, mat[n])
	}
}
