//go:build amd64 && !purego

package kernels

import (
	"math/rand/v2"
	"testing"

	"github.com/bulkhead-llm/bulkhead/internal/tensor"
)

// gemmQ6Kx16VNNI must give the bits of gemmQ6Kx8 on each of its two
// groups, 13..16 tokens (the second group's missing tokens zero blocks).
func TestGemmQ6K16VNNIMatchesAVX2(t *testing.T) {
	needKVNNI(t)
	kVNNISweep(t, rand.New(rand.NewPCG(95, 96)), tensor.Q6_K, 13, 16, pairRun(gemmQ6Kx16VNNI, gemmQ6Kx8))
}

// gemmQ6Kx8VNNI must give gemmQ6Kx8's bits on the same interleaved
// activations, 5..8 tokens.
func TestGemmQ6KVNNIMatchesAVX2(t *testing.T) {
	needKVNNI(t)
	kVNNISweep(t, rand.New(rand.NewPCG(97, 98)), tensor.Q6_K, 5, 8, eightRun(gemmQ6Kx8VNNI, gemmQ6Kx8))
}

// BenchmarkGemmQ6K16VNNI compares two calls of gemmQ6Kx8 (the AVX2
// kernel Q6_K's batched products take today) with one of gemmQ6Kx16VNNI
// on sixteen tokens, alternating in one run (the machine's load varies
// between runs), one thread, on matrices of 420 KiB.
func BenchmarkGemmQ6K16VNNI(b *testing.B) {
	benchKPair(b, tensor.Q6_K, [][2]int{{512, 1024}, {256, 2048}}, gemmQ6Kx8, gemmQ6Kx16VNNI)
}

// BenchmarkGemmQ6KVNNI compares gemmQ6Kx8 with gemmQ6Kx8VNNI on eight
// tokens, alternating in one run, one thread, on matrices of 420 KiB.
func BenchmarkGemmQ6KVNNI(b *testing.B) {
	benchKEight(b, tensor.Q6_K, [][2]int{{512, 1024}, {256, 2048}}, gemmQ6Kx8, gemmQ6Kx8VNNI)
}
