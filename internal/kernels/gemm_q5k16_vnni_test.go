//go:build amd64 && !purego

package kernels

import (
	"math/rand/v2"
	"testing"

	"github.com/bulkhead-llm/bulkhead/internal/tensor"
)

// gemmQ5Kx16VNNI must give the bits of gemmQ5Kx8 on each of its two
// groups: partial and whole groups of four rows and several groups, one
// to five superblocks, 13..16 tokens (the second group's missing tokens
// zero blocks), on quantised and kqWeights' extreme weights, against
// kqActivations' extremes and quantised activations.
func TestGemmQ5K16VNNIMatchesAVX2(t *testing.T) {
	needKVNNI(t)
	kVNNISweep(t, rand.New(rand.NewPCG(99, 100)), tensor.Q5_K, 13, 16, pairRun(gemmQ5Kx16VNNI, gemmQ5Kx8))
}

// BenchmarkGemmQ5K16VNNI compares two calls of gemmQ5Kx8 with one of
// gemmQ5Kx16VNNI on sixteen tokens, alternating in one run (the
// machine's load varies between runs), on matrices of 352 KiB.
func BenchmarkGemmQ5K16VNNI(b *testing.B) {
	benchKPair(b, tensor.Q5_K, [][2]int{{512, 1024}, {256, 2048}}, gemmQ5Kx8, gemmQ5Kx16VNNI)
}
