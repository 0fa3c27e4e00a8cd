package kernels

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/bulkhead-llm/bulkhead/internal/tensor"
)

// legacyTypes are the 32-element types besides Q8_0: Q4_0 (whose Go
// reference is dotQuantGo) and the ones legacy.go names (dotLegacyGo),
// which share its block layout and these tests.
var legacyTypes = []tensor.DType{tensor.Q4_0, tensor.Q4_1, tensor.Q5_0, tensor.Q5_1}

// lgWeights returns rows×cols of Q4_0, Q4_1, Q5_0 or Q5_1 bytes written
// directly: random blocks, and blocks of all-maximum or all-zero quants
// and fifth bits, with d and m from kqF16 (zero, subnormal, the largest
// finite float16, ordinary values).
func lgWeights(rng *rand.Rand, typ tensor.DType, rows, cols int) *Matrix {
	rb, err := typ.RowBytes(cols)
	if err != nil {
		panic(err)
	}
	bb := typ.BlockBytes()
	data := make([]byte, rows*rb)
	for off := 0; off < len(data); off += bb {
		b := data[off : off+bb]
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		switch rng.IntN(5) {
		case 0: // every quant at its maximum
			for i := 2; i < bb; i++ {
				b[i] = 0xff
			}
		case 1: // every quant 0
			clear(b[2:])
		case 2: // fifth bits alternating, nibbles random
			if typ == tensor.Q5_0 || typ == tensor.Q5_1 {
				binary.LittleEndian.PutUint32(b[bb-20:], 0x5555aaaa)
			}
		}
		binary.LittleEndian.PutUint16(b, kqF16(rng))
		if typ == tensor.Q4_1 || typ == tensor.Q5_1 {
			binary.LittleEndian.PutUint16(b[2:], kqF16(rng))
		}
	}
	return &Matrix{Type: typ, Rows: rows, Cols: cols, Data: data}
}

// Every row count 1..9 (whole and partial groups of four), every token
// count 1..9 (the four-, two- and one-token kernels and their mixtures),
// one, three and sixteen blocks per row, on extreme weights and
// activations: the assembly gives the Go reference's bits.
func TestLegacySIMDMatchesGo(t *testing.T) { eachQ8Path(t, legacySIMDMatchesGo) }

func legacySIMDMatchesGo(t *testing.T) {
	needSIMD(t)
	rng := rand.New(rand.NewPCG(51, 52))
	kqSweep(t, rng, legacyTypes, []int{32, 96, 512}, 1, 9)
}

// A matrix larger than one tile, on a sub-range of rows as a pool thread
// gets it, so tiling and prefetch run over several groups.
func TestLegacySIMDTiles(t *testing.T) { eachQ8Path(t, legacySIMDTiles) }

func legacySIMDTiles(t *testing.T) {
	needSIMD(t)
	rng := rand.New(rand.NewPCG(53, 54))
	for _, typ := range legacyTypes {
		kqTiles(t, rng, lgWeights(rng, typ, 301, 2048), []int{1, 3, 6})
	}
}

// Against a float64 sum of the decoded weights (tensor.Dequantize) times
// the decoded quantised activations only order.go's float32 roundings
// remain: a kernel that paired a weight with the wrong activation, took a
// fifth bit from the wrong element or dropped the min would be off by
// about the size of the sum. Both paths, through the pool.
func TestLegacyMatMulMatchesReference(t *testing.T) {
	// The min term m·Σx is summed apart from d·Σq·x, so their cancellation
	// can cost a little more than the per-element magnitude suggests.
	kqReference(t, rand.New(rand.NewPCG(55, 56)), legacyTypes, 352, 4e-6)
}

// A one-hot activation (times a power of two, so its scale is exact)
// picks out single weights: the product with e_c is weight c itself, up
// to the roundings of d·dx, m·dx and the two terms. This pins the element order, fifth
// bits included, column by column.
func TestLegacyPicksColumns(t *testing.T) {
	rng := rand.New(rand.NewPCG(57, 58))
	for _, simd := range []bool{false, true} {
		if simd && !hasAVX2 {
			continue
		}
		for _, typ := range legacyTypes {
			rows, cols := 5, 64
			w, dec := randMatrix(t, rng, typ, rows, cols)
			x := make([]float32, cols)
			out := make([]float32, rows)
			p := NewPool(1)
			for c := 0; c < cols; c++ {
				clear(x)
				x[c] = 4
				withPath(simd, func() { p.MatMul(out, w, x, 1) })
				for r := 0; r < rows; r++ {
					// q·d and m are rounded apart, so the error scales
					// with the block's values, not with their sum.
					var bmax float64
					for _, v := range dec[r*cols+c/32*32 : r*cols+c/32*32+32] {
						bmax = max(bmax, math.Abs(float64(v)))
					}
					want := 4 * dec[r*cols+c]
					if math.Abs(float64(out[r]-want)) > 1e-5*bmax {
						t.Fatalf("simd=%v %s row %d column %d: got %g, want %g", simd, typ, r, c, out[r], want)
					}
				}
			}
			p.Close()
		}
	}
}

// Real quantised matrices and activations through the pool, as the model
// runs them: SIMD and Go dispatch agree on every token count, and a
// token's result does not depend on its batch.
func TestLegacyPoolMatchesGo(t *testing.T) {
	needSIMD(t)
	rng := rand.New(rand.NewPCG(59, 60))
	for _, typ := range legacyTypes {
		w, _ := randMatrix(t, rng, typ, 67, 512)
		x := randFloats(rng, 9*w.Cols)
		one := matMulNew(1, w, x[:w.Cols], 1)
		for _, n := range []int{1, 2, 5, 9} {
			simd := matMulNew(2, w, x[:n*w.Cols], n)
			var goPath []float32
			withPath(false, func() { goPath = matMulNew(2, w, x[:n*w.Cols], n) })
			if j := firstBitDiff(simd, goPath); j >= 0 {
				t.Fatalf("%s n=%d: value %d is %g on SIMD, %g on Go", typ, n, j, simd[j], goPath[j])
			}
			if j := firstBitDiff(simd[:w.Rows], one); j >= 0 {
				t.Fatalf("%s n=%d: token 0 row %d is %g, alone %g", typ, n, j, simd[j], one[j])
			}
		}
	}
}

// BenchmarkLegacyMatVec is one decode token against Q4_1, Q5_0 and Q5_1
// weights (and Q4_0 for comparison): bytes per second is weight bytes
// streamed.
func BenchmarkLegacyMatVec(b *testing.B) {
	for _, typ := range []tensor.DType{tensor.Q4_0, tensor.Q4_1, tensor.Q5_0, tensor.Q5_1} {
		w := benchMatrix(b, typ, 2048, 2048)
		x := randFloats(rand.New(rand.NewPCG(2, 3)), 2048)
		out := make([]float32, 2048)
		b.Run(typ.String(), func(b *testing.B) {
			p := NewPool(1)
			defer p.Close()
			p.MatMul(out, w, x, 1)
			b.SetBytes(int64(len(w.Data)))
			for b.Loop() {
				p.MatMul(out, w, x, 1)
			}
		})
	}
}
