//go:build amd64 && !purego

package transfer

import "golang.org/x/sys/cpu"

var haveCRC3 = cpu.X86.HasSSE42

// crc3 returns the CRC32C of p[0:n], p[n:2n] and p[2n:3n], computed
// together (crcvec_amd64.s). n is a multiple of 8, at least 64.
//
//go:noescape
func crc3(p *byte, n int) (a, b, c uint32)

// crcCopy3 is crc3 of src[0:3n] that also copies it to dst[0:3n], with
// stores that bypass the cache (crcvec_amd64.s).
//
//go:noescape
func crcCopy3(dst, src *byte, n int) (a, b, c uint32)
