package transfer

import (
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

// vecCases calls check for every case TestCRCVecs and TestCopyVecs run:
// vector sizes that take the three-chain path and sizes that do not (not
// a multiple of 8, or under 64 bytes), several alignments, and counts
// that leave zero to two vectors over. p holds count vectors and half a
// vector more, which is not one.
func vecCases(t *testing.T, seed uint64, check func(vec, count, off int, p []byte)) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, seed+1))
	buf := make([]byte, 100000)
	for i := range buf {
		buf[i] = byte(rng.Uint32())
	}
	for _, vec := range []int{4, 60, 64, 68, 72, 256, 1000, 1024, 3072, 3076, 12288} {
		for _, count := range []int{0, 1, 2, 3, 4, 5, 7} {
			for _, off := range []int{0, 3, 8} {
				check(vec, count, off, buf[off:off+vec*count+vec/2])
			}
		}
	}
}

// checkVecSums fails unless sums[:count] are hash/crc32's checksums of
// p's first count vec-byte vectors.
func checkVecSums(t *testing.T, fn string, sums []uint32, p []byte, vec, count, off int) {
	t.Helper()
	for i := range count {
		if want := crc32.Checksum(p[i*vec:(i+1)*vec], castagnoli); sums[i] != want {
			t.Fatalf("%s: vec %d count %d offset %d: vector %d: %08x, hash/crc32 %08x", fn, vec, count, off, i, sums[i], want)
		}
	}
}

// TestCRCVecs checks crcVecs against hash/crc32, vector by vector, over
// vecCases, and with dst shorter than the vectors p holds.
func TestCRCVecs(t *testing.T) {
	vecCases(t, 1, func(vec, count, off int, p []byte) {
		dst := make([]uint32, count+2)
		if got := crcVecs(dst, p, vec); got != count {
			t.Fatalf("vec %d count %d: crcVecs did %d vectors", vec, count, got)
		}
		checkVecSums(t, "crcVecs", dst, p, vec, count, off)
		if dst[count] != 0 || dst[count+1] != 0 {
			t.Fatalf("vec %d count %d: wrote past the vectors", vec, count)
		}
		if count > 1 {
			short := make([]uint32, count-1)
			if got := crcVecs(short, p, vec); got != count-1 {
				t.Fatalf("vec %d: with room for %d, crcVecs did %d", vec, count-1, got)
			}
		}
	})
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

// TestCopyVecs checks copyVecs against copy and hash/crc32 over
// vecCases, and that it writes nothing outside the vectors it copies.
func TestCopyVecs(t *testing.T) {
	vecCases(t, 3, func(vec, count, off int, p []byte) {
		dst := make([]byte, vec*count+16)
		for i := range dst {
			dst[i] = 0xee
		}
		sums := make([]uint32, count+1)
		d := dst[off%8:]
		if got := copyVecs(d, sums[:count], p, vec); got != count {
			t.Fatalf("vec %d count %d: copied %d vectors", vec, count, got)
		}
		checkVecSums(t, "copyVecs", sums, p, vec, count, off)
		if string(d[:count*vec]) != string(p[:count*vec]) {
			t.Fatalf("vec %d count %d offset %d: vectors copied wrong", vec, count, off)
		}
		for i := range dst {
			if (i < off%8 || i >= off%8+count*vec) && dst[i] != 0xee {
				t.Fatalf("vec %d count %d: wrote byte %d outside the vectors", vec, count, i)
			}
		}
	})
}

// BenchmarkCopyVecs compares copying 37.7 MB of 3 KiB vectors into cold
// memory and then checksumming the copy (what WriteKV.ApplyReadBack did:
// memmove, then crcVecs over the destination) with copyVecs, from a
// 512 KiB source in cache (a received frame) to a 36 MiB destination
// (pages), one frame's worth per call.
//
//	go test -run '^$' -bench CopyVecs ./internal/transfer/
func BenchmarkCopyVecs(b *testing.B) {
	const vec, frame, total = 3 << 10, 510 << 10, 36 << 20
	src := make([]byte, frame)
	for i := range src {
		src[i] = byte(i)
	}
	dst := make([]byte, total)
	clear(dst)
	sums := make([]uint32, frame/vec)
	run := func(b *testing.B, f func(d []byte)) {
		b.SetBytes(frame)
		off := 0
		for b.Loop() {
			if off+frame > total {
				off = 0
			}
			f(dst[off : off+frame])
			off += frame
		}
	}
	b.Run("copy+crcVecs", func(b *testing.B) {
		run(b, func(d []byte) { copy(d, src); crcVecs(sums, d, vec) })
	})
	b.Run("copyVecs", func(b *testing.B) {
		run(b, func(d []byte) { copyVecs(d, sums, src, vec) })
	})
}
