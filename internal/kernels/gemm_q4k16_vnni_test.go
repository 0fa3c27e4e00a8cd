//go:build amd64 && !purego

package kernels

import (
	"math/rand/v2"
	"testing"

	"github.com/bulkhead-llm/bulkhead/internal/tensor"
)

// gemmQ4Kx16VNNI must give the bits of gemmQ4Kx8 on each of its two
// groups: partial and whole groups of four rows and several groups, one
// to five superblocks, 13..16 tokens (the second group's missing tokens
// zero blocks), on quantised and kqWeights' extreme weights, against
// kqActivations' extremes and quantised activations.
func TestGemmQ4K16VNNIMatchesAVX2(t *testing.T) {
	needKVNNI(t)
	kVNNISweep(t, rand.New(rand.NewPCG(93, 94)), tensor.Q4_K, 13, 16, pairRun(gemmQ4Kx16VNNI, gemmQ4Kx8))
}

// BenchmarkGemmQ4K16VNNI compares two calls of gemmQ4Kx8VNNI with one of
// gemmQ4Kx16VNNI on sixteen tokens, alternating in one run (the
// machine's load varies between runs), on matrices of 288 KiB.
func BenchmarkGemmQ4K16VNNI(b *testing.B) {
	benchKPair(b, tensor.Q4_K, [][2]int{{512, 1024}, {256, 2048}}, gemmQ4Kx8VNNI, gemmQ4Kx16VNNI)
}
