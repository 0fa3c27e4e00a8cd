package transfer

import (
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

// TestCRCVecs checks crcVecs against hash/crc32, vector by vector, over
// vector sizes that take the three-chain path and sizes that do not (not
// a multiple of 8, or under 64 bytes), at several alignments, with
// counts that leave zero to two vectors over, and with dst shorter than
// the vectors p holds.
func TestCRCVecs(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 100000)
	for i := range buf {
		buf[i] = byte(rng.Uint32())
	}
	for _, vec := range []int{4, 60, 64, 68, 72, 256, 1000, 1024, 3072, 3076, 12288} {
		for _, count := range []int{0, 1, 2, 3, 4, 5, 7} {
			for _, off := range []int{0, 3, 8} {
				p := buf[off : off+vec*count+vec/2] // and half a vector more, which is not one
				dst := make([]uint32, count+2)
				if got := crcVecs(dst, p, vec); got != count {
					t.Fatalf("vec %d count %d: crcVecs did %d vectors", vec, count, got)
				}
				for i := range count {
					if want := crc32.Checksum(p[i*vec:(i+1)*vec], castagnoli); dst[i] != want {
						t.Fatalf("vec %d count %d offset %d: vector %d: %08x, hash/crc32 %08x", vec, count, off, i, dst[i], want)
					}
				}
				if dst[count] != 0 || dst[count+1] != 0 {
					t.Fatalf("vec %d count %d: wrote past the vectors", vec, count)
				}
				if count > 1 {
					short := make([]uint32, count-1)
					if got := crcVecs(short, p, vec); got != count-1 {
						t.Fatalf("vec %d: with room for %d, crcVecs did %d", vec, count-1, got)
					}
				}
			}
		}
	}
}

// BenchmarkCRCVecs compares crcVecs with hash/crc32 vector by vector on
// K/V vectors of 1 KiB (kvdim 256, the 1.1B shape), 3 KiB (the 110M
// shape) and 12 KiB, over memory in cache (hot: 256 KiB) and not (cold:
// 36 MiB, about one 110M transfer, read once per pass).
//
//	go test -run '^$' -bench CRCVecs ./internal/transfer/
func BenchmarkCRCVecs(b *testing.B) {
	for _, vec := range []int{1 << 10, 3 << 10, 12 << 10} {
		for _, total := range []int{256 << 10, 36 << 20} {
			buf := make([]byte, total/vec*vec)
			for i := range buf {
				buf[i] = byte(i * 7)
			}
			dst := make([]uint32, len(buf)/vec)
			name := "hot"
			if total > 1<<20 {
				name = "cold"
			}
			b.Run(fmt.Sprintf("vec=%dKiB/%s/crcVecs", vec>>10, name), func(b *testing.B) {
				b.SetBytes(int64(len(buf)))
				for b.Loop() {
					crcVecs(dst, buf, vec)
				}
			})
			b.Run(fmt.Sprintf("vec=%dKiB/%s/hash-crc32", vec>>10, name), func(b *testing.B) {
				b.SetBytes(int64(len(buf)))
				for b.Loop() {
					for i := range dst {
						dst[i] = crc32.Checksum(buf[i*vec:(i+1)*vec], castagnoli)
					}
				}
			})
		}
	}
}
