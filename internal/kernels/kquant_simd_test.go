package kernels

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/bulkhead-llm/bulkhead/internal/tensor"
)

// The K-quant assembly kernels must give dotQ4KGo's and dotQ6KGo's bits.
// Quantising real values would only ever produce well-behaved blocks, so
// these tests write the blocks' bytes directly: random bytes (every packing
// of scales, mins and quants), the extremes of each field, and float16
// scales and activation scales from zero and subnormal to the largest that
// keep the sums finite.

// kqF16s are the float16 values the tests put in d and dmin: zero, the
// smallest and largest subnormals, ordinary values of both signs and the
// largest finite one.
var kqF16s = []uint16{0x0000, 0x8000, 0x0001, 0x03ff, 0x0400, 0x3c00, 0xbc00, 0x2e66, 0x1234, 0x7bff, 0xfbff}

// kqF16 returns d or dmin: usually an ordinary random value, sometimes one
// of kqF16s.
func kqF16(rng *rand.Rand) uint16 {
	if rng.IntN(3) == 0 {
		return kqF16s[rng.IntN(len(kqF16s))]
	}
	return tensor.F32ToF16(float32(rng.NormFloat64() * 0.01))
}

// kqWeights returns rows×cols of Q4_K, Q5_K or Q6_K bytes, each superblock
// drawn from one of several shapes of extreme or random content (Q5_K's
// from q5kWeights, Q3_K's and Q2_K's from q23kWeights; Q4_0, Q4_1, Q5_0
// and Q5_1 from lgWeights).
func kqWeights(rng *rand.Rand, typ tensor.DType, rows, cols int) *Matrix {
	switch typ {
	case tensor.Q5_K:
		return q5kWeights(rng, rows, cols)
	case tensor.Q4_0, tensor.Q4_1, tensor.Q5_0, tensor.Q5_1:
		return lgWeights(rng, typ, rows, cols)
	case tensor.Q3_K, tensor.Q2_K:
		return q23kWeights(rng, typ, rows, cols)
	}
	rb, err := typ.RowBytes(cols)
	if err != nil {
		panic(err)
	}
	data := make([]byte, rows*rb)
	size := tensor.Q4KBytes
	if typ == tensor.Q6_K {
		size = tensor.Q6KBytes
	}
	for off := 0; off < len(data); off += size {
		b := data[off : off+size]
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		if typ == tensor.Q4_K {
			switch rng.IntN(6) {
			case 0: // every scale and min 63
				for i := 4; i < 16; i++ {
					b[i] = 0xff
				}
			case 1: // all quants 15
				for i := 16; i < size; i++ {
					b[i] = 0xff
				}
			case 2: // all quants 0, scales and mins 63
				for i := 4; i < 16; i++ {
					b[i] = 0xff
				}
				clear(b[16:])
			case 3: // every scale 0 and min 63, or the reverse
				kqSetScales(b, rng.IntN(2) == 0)
			}
			binary.LittleEndian.PutUint16(b[0:], kqF16(rng))
			binary.LittleEndian.PutUint16(b[2:], kqF16(rng))
			continue
		}
		switch rng.IntN(6) {
		case 0: // quants 63
			for i := 0; i < 192; i++ {
				b[i] = 0xff
			}
		case 1: // quants 0
			for i := 0; i < 192; i++ {
				b[i] = 0
			}
		case 2: // scales at the int8 extremes
			ext := []byte{0x7f, 0x80, 0x81, 0x00}
			for i := 192; i < 208; i++ {
				b[i] = ext[rng.IntN(len(ext))]
			}
		case 3: // quants 0 with scales -128, the largest |S|
			for i := 0; i < 192; i++ {
				b[i] = 0
			}
			for i := 192; i < 208; i++ {
				b[i] = 0x80
			}
		}
		binary.LittleEndian.PutUint16(b[208:], kqF16(rng))
	}
	return &Matrix{Type: typ, Rows: rows, Cols: cols, Data: data}
}

// kqActivations returns n tokens of nb quantised activation blocks with
// random, extreme (±127, and -128, which quantizeX never makes but the
// kernels handle) and zero contents, and scales from zero and subnormal
// to 2^20.
func kqActivations(rng *rand.Rand, n, nb int) []byte {
	xq := make([]byte, n*nb*xBlockBytes)
	for k := 0; k < n*nb; k++ {
		blk := xq[k*xBlockBytes : (k+1)*xBlockBytes]
		var dx float32
		switch rng.IntN(8) {
		case 0:
			dx = 0
		case 1:
			dx = math.Float32frombits(uint32(rng.IntN(1 << 23))) // subnormal
		default:
			dx = float32(rng.Float64() * math.Ldexp(1, rng.IntN(41)-20))
		}
		binary.LittleEndian.PutUint32(blk, math.Float32bits(dx))
		q := blk[4:]
		switch rng.IntN(6) {
		case 0:
			fillBytes(q, 127)
		case 1:
			fillBytes(q, 0x81) // -127
		case 2:
			clear(q)
			if rng.IntN(2) == 0 {
				clear(blk[:4])
			}
		case 3:
			for i := range q {
				q[i] = []byte{0x7f, 0x81, 0x80}[rng.IntN(3)]
			}
		default:
			for i := range q {
				q[i] = byte(int8(rng.IntN(255) - 127))
			}
		}
	}
	return xq
}

// kqCompare runs matRowsSIMD and matRowsGo on the same weights and
// activations and reports the first differing bits.
func kqCompare(t *testing.T, w *Matrix, xq []byte, n int) {
	t.Helper()
	got := kqGuarded(n * w.Rows)
	want := make([]float32, n*w.Rows)
	for i := range got {
		got[i] = float32(math.NaN()) // a value never written shows up
	}
	matRowsSIMD(w, 0, w.Rows, nil, xq, nil, n, got, w.Rows, nil)
	matRowsGo(w, 0, w.Rows, nil, xq, n, want, w.Rows)
	kqGuardIntact(t, got)
	if j := firstBitDiff(got, want); j >= 0 {
		t.Fatalf("%s %dx%d n=%d: token %d row %d is %g (%#08x), the Go kernel gives %g (%#08x)",
			w.Type, w.Rows, w.Cols, n, j/w.Rows, j%w.Rows, got[j], math.Float32bits(got[j]),
			want[j], math.Float32bits(want[j]))
	}
}

// kqGuarded returns n zeroed float32s followed, within the same
// allocation, by a guard of canaries that kqGuardIntact checks: a kernel
// writing past the last token's results shows.
func kqGuarded(n int) []float32 {
	buf := make([]float32, n+kqGuard)
	for i := n; i < len(buf); i++ {
		buf[i] = math.Float32frombits(0x7fc0dead)
	}
	return buf[:n]
}

// kqGuard is the guard's length: a row group of four rows for sixteen
// tokens and more.
const kqGuard = 256

// kqGuardIntact fails t if anything wrote past got's length.
func kqGuardIntact(t *testing.T, got []float32) {
	t.Helper()
	for i, v := range got[len(got) : len(got)+kqGuard] {
		if math.Float32bits(v) != 0x7fc0dead {
			t.Fatalf("a kernel wrote %d values past the last result (%g)", i+1, v)
		}
	}
}

// Every row count 1..9 (whole and partial groups of four rows), every
// token count 1..9 (the four-, two- and one-token kernels and their
// mixtures), one to eight superblocks per row.
func TestKQuantSIMDMatchesGo(t *testing.T) { eachQ8Path(t, kQuantSIMDMatchesGo) }

func kQuantSIMDMatchesGo(t *testing.T) {
	needSIMD(t)
	kqSweep(t, rand.New(rand.NewPCG(41, 42)), kTypes, kqCols, 1, 9)
}

// kqCols are one, three and eight superblocks.
var kqCols = []int{256, 768, 2048}

// kqSweep compares the SIMD path with the Go one for every type in types,
// row count 1..9, token count n0..n1 and row length in colsList, on fresh
// extreme weights (kqWeights) and activations each time.
func kqSweep(t *testing.T, rng *rand.Rand, types []tensor.DType, colsList []int, n0, n1 int) {
	t.Helper()
	for _, typ := range types {
		for _, cols := range colsList {
			for rows := 1; rows <= 9; rows++ {
				for n := n0; n <= n1; n++ {
					w := kqWeights(rng, typ, rows, cols)
					kqCompare(t, w, kqActivations(rng, n, cols/32), n)
				}
			}
		}
	}
}

// A matrix larger than one tile of tileBytes, so that matRowsSIMD's tiling
// and the kernels' prefetch run over several groups, on a sub-range of
// rows as a pool thread gets it.
func TestKQuantSIMDTiles(t *testing.T) { eachQ8Path(t, kQuantSIMDTiles) }

func kQuantSIMDTiles(t *testing.T) {
	needSIMD(t)
	rng := rand.New(rand.NewPCG(43, 44))
	for _, typ := range kTypes {
		kqTiles(t, rng, kqWeights(rng, typ, 301, 1024), []int{1, 3, 6})
	}
}

// kqTiles compares the SIMD path with the Go one on w for each token count
// in ns: on the whole matrix (kqCompare), then on rows [37, 290) alone, as
// a pool thread gets them. w should span several tiles of tileBytes.
func kqTiles(t *testing.T, rng *rand.Rand, w *Matrix, ns []int) {
	t.Helper()
	for _, n := range ns {
		xq := kqActivations(rng, n, w.Cols/32)
		kqCompare(t, w, xq, n)
		got := kqGuarded(n * w.Rows)
		want := make([]float32, n*w.Rows)
		matRowsSIMD(w, 37, 290, nil, xq, nil, n, got, w.Rows, nil)
		matRowsGo(w, 37, 290, nil, xq, n, want, w.Rows)
		kqGuardIntact(t, got)
		if j := firstBitDiff(got, want); j >= 0 {
			t.Fatalf("%s %dx%d rows [37, 290) n=%d: value %d is %g, Go gives %g", w.Type, w.Rows, w.Cols, n, j, got[j], want[j])
		}
	}
}

// Real quantised matrices and activations through the pool, as the model
// runs them: SIMD and Go dispatch agree on every token count.
func TestKQuantSIMDPoolMatchesGo(t *testing.T) { eachQ8Path(t, kQuantSIMDPoolMatchesGo) }

func kQuantSIMDPoolMatchesGo(t *testing.T) {
	needSIMD(t)
	rng := rand.New(rand.NewPCG(45, 46))
	for _, typ := range kTypes {
		w, _ := randMatrix(t, rng, typ, 67, 512)
		for _, n := range []int{1, 2, 5, 8} {
			x := randFloats(rng, n*w.Cols)
			simd := matMulNew(2, w, x, n)
			var goPath []float32
			withPath(false, func() { goPath = matMulNew(2, w, x, n) })
			if j := firstBitDiff(simd, goPath); j >= 0 {
				t.Fatalf("%s n=%d: value %d is %g on SIMD, %g on Go", typ, n, j, simd[j], goPath[j])
			}
		}
	}
}

// BenchmarkKQuantMatVec is one decode token against Q4_K, Q6_K and, for
// comparison, Q8_0 weights: bytes per second is weight bytes streamed.
func BenchmarkKQuantMatVec(b *testing.B) {
	for _, typ := range []tensor.DType{tensor.Q4_K, tensor.Q6_K, tensor.Q8_0} {
		for _, sh := range benchShapes[:2] {
			w := benchMatrix(b, typ, sh[0], sh[1])
			x := randFloats(rand.New(rand.NewPCG(2, 3)), sh[1])
			out := make([]float32, sh[0])
			for _, th := range []int{1, 2} {
				b.Run(fmt.Sprintf("%s/%dx%d/threads=%d", typ, sh[0], sh[1], th), func(b *testing.B) {
					p := NewPool(th)
					defer p.Close()
					p.MatMul(out, w, x, 1)
					b.SetBytes(int64(len(w.Data)))
					for b.Loop() {
						p.MatMul(out, w, x, 1)
					}
				})
			}
		}
	}
}

// kqSetScales packs every sub-block's 6-bit scale as 0 and min as 63 into
// a Q4_K or Q5_K block header (bytes 4..16), or the reverse when swap.
func kqSetScales(b []byte, swap bool) {
	sc, m := byte(0), byte(63)
	if swap {
		sc, m = m, sc
	}
	for j := 0; j < 4; j++ {
		b[4+j] = sc | (sc>>4)<<6
		b[8+j] = m | (m>>4)<<6
		b[12+j] = sc&0x0f | (m&0x0f)<<4
	}
}
