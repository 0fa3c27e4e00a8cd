package transfer

import "hash/crc32"

// crcVecs sets dst[i] to the CRC32C of p's i-th vec-byte vector, for the
// whole vectors p holds (at most len(dst)), and returns how many.
//
// It is what a transfer checksums most: K and V vectors one at a time, a
// few KiB each (3 KiB at the 110M shape), in runs of consecutive tokens.
// hash/crc32 cuts an input that size into 168-byte blocks, three at a
// time, and pays a combine for every 504 bytes. Where the CPU has CRC32C
// instructions, crcVecs instead checksums three consecutive vectors
// together (crc3), one chain each, which hides the instruction's latency
// with no combine at all, with software prefetch ahead of each chain for
// memory not yet in cache. Vectors left over go through hash/crc32.
func crcVecs(dst []uint32, p []byte, vec int) int {
	n := min(len(dst), len(p)/vec)
	i := 0
	if haveCRC3 && vec%8 == 0 && vec >= 64 {
		for ; i+3 <= n; i += 3 {
			dst[i], dst[i+1], dst[i+2] = crc3(&p[i*vec], vec)
		}
	}
	for ; i < n; i++ {
		dst[i] = crc32.Checksum(p[i*vec:(i+1)*vec], castagnoli)
	}
	return n
}

// copyVecs copies p's whole vec-byte vectors (at most len(sums)) to dst,
// setting sums[i] to the CRC32C of the i-th, and returns how many: one
// pass where a copy and crcVecs over the copy would make two, and where
// the CPU allows (crcCopy3), stores that do not read dst into the cache
// first. dst must hold as many bytes as are copied.
func copyVecs(dst []byte, sums []uint32, p []byte, vec int) int {
	n := min(len(sums), len(p)/vec)
	_ = dst[:n*vec]
	i := 0
	if haveCRC3 && vec%8 == 0 && vec >= 64 {
		for ; i+3 <= n; i += 3 {
			sums[i], sums[i+1], sums[i+2] = crcCopy3(&dst[i*vec], &p[i*vec], vec)
		}
	}
	for ; i < n; i++ {
		copy(dst[i*vec:(i+1)*vec], p[i*vec:(i+1)*vec])
		sums[i] = crc32.Checksum(p[i*vec:(i+1)*vec], castagnoli)
	}
	return n
}
