package transfer

import "sync"

// CRC32C combination: crc(A‖B) from crc(A), crc(B) and len(B), without
// reading A or B again (the GF(2) arithmetic zlib's crc32_combine uses).
//
// A Sender needs two checksums over the same bytes in two orders: the
// frame's CRC over its payload (layer-major) and the digest's per-token
// CRCs (token-major). Checksumming each (token, layer, K or V) vector
// once and combining the results in both orders reads the payload once
// instead of twice.

// castagnoliReflected is the CRC32C polynomial, bit-reversed as
// hash/crc32 uses it.
const castagnoliReflected = 0x82f63b78

// mulModP returns a·b modulo the polynomial, both reflected (bit 31 is
// x^0).
func mulModP(a, b uint32) uint32 {
	var p uint32
	for m := uint32(1) << 31; m != 0; m >>= 1 {
		if a&m != 0 {
			p ^= b
			if a&(m-1) == 0 {
				break
			}
		}
		if b&1 != 0 {
			b = b>>1 ^ castagnoliReflected
		} else {
			b >>= 1
		}
	}
	return p
}

// x2nTable[k] is x^(2^k) modulo the polynomial.
var x2nTable = sync.OnceValue(func() (t [32]uint32) {
	p := uint32(1) << 30 // x^1
	t[0] = p
	for k := 1; k < 32; k++ {
		p = mulModP(p, p)
		t[k] = p
	}
	return t
})

// crcShift is the operator that appends n zero bytes' worth of shift to
// a CRC: combineCRC(a, b, crcShift(len(b))) is crc(A‖B).
func crcShift(n int) uint32 {
	t := x2nTable()
	p := uint32(1) << 31 // x^0
	for k := 3; n != 0; n, k = n>>1, k+1 {
		if n&1 != 0 {
			p = mulModP(t[k&31], p)
		}
	}
	return p
}

// combineCRC returns crc(A‖B) given a = crc(A), b = crc(B) and shift =
// crcShift(len(B)).
func combineCRC(a, b, shift uint32) uint32 { return mulModP(shift, a) ^ b }

// crcCombiner appends a fixed length: combine(a, b) is crc(A‖B) for every
// B of that length. Multiplying by a constant is linear over GF(2), so it
// is four table lookups, one per byte of a, instead of mulModP's loop: a
// Sender combines twice per K or V vector it sends.
type crcCombiner [4][256]uint32

// combinerFor returns the combiner for blocks of n bytes, built once per
// n (a Sender's n is 4·kvdim, the same for every transfer of a model).
func combinerFor(n int) *crcCombiner {
	if c, ok := combiners.Load(n); ok {
		return c.(*crcCombiner)
	}
	shift := crcShift(n)
	c := new(crcCombiner)
	for k := range 4 {
		for b := range 256 {
			c[k][b] = mulModP(shift, uint32(b)<<(8*k))
		}
	}
	got, _ := combiners.LoadOrStore(n, c)
	return got.(*crcCombiner)
}

var combiners sync.Map // int -> *crcCombiner

func (c *crcCombiner) combine(a, b uint32) uint32 {
	return c[0][a&0xff] ^ c[1][a>>8&0xff] ^ c[2][a>>16&0xff] ^ c[3][a>>24] ^ b
}
