package kernels

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/bulkhead-llm/bulkhead/internal/tensor"
)

// withKTypes runs the shared K-quant tests of kquant_test.go on types
// instead of Q4_K and Q6_K: they check the kernels against a float64
// reference over the decoded weights, column by column with one-hot
// activations, for batch, thread and dispatch invariance, allocations and
// RowTo, none of it specific to a layout.
func withKTypes(t *testing.T, types []tensor.DType, test func(*testing.T)) {
	old := kTypes
	kTypes = types
	defer func() { kTypes = old }()
	test(t)
}

// moreKTypes are the K-quants the shared tests of kquant_test.go do not
// cover by default: Q5_K, and Q3_K and Q2_K (q3k_test.go).
var moreKTypes = []tensor.DType{tensor.Q5_K, tensor.Q3_K, tensor.Q2_K}

func TestMoreKQuantsMatMulMatchesReference(t *testing.T) {
	withKTypes(t, moreKTypes, TestKQuantMatMulMatchesReference)
}

func TestMoreKQuantsMatMulPicksColumns(t *testing.T) {
	withKTypes(t, moreKTypes, TestKQuantMatMulPicksColumns)
}

func TestMoreKQuantsBatchInvariance(t *testing.T) {
	withKTypes(t, moreKTypes, TestKQuantBatchInvariance)
}

func TestMoreKQuantsMatMulsAndRowTo(t *testing.T) {
	withKTypes(t, moreKTypes, TestKQuantMatMulsMixed)
	withKTypes(t, moreKTypes, TestKQuantRowTo)
}

// dotQ5KGo on hand-made blocks against a sum written out element by
// element from tensor's decoder (exactDot). A quant bit read from the
// wrong qh bit or nibble changes the sum.
func TestDotQ5KExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(51, 52))
	for trial := 0; trial < 50; trial++ {
		blk := make([]byte, tensor.Q5KBytes)
		for i := range blk {
			blk[i] = byte(rng.Uint32())
		}
		binary.LittleEndian.PutUint16(blk[0:], 0x3c00)
		binary.LittleEndian.PutUint16(blk[2:], 0x3c00)
		exactDot(t, rng, tensor.Q5_K, blk, dotQ5KGo)
	}
}

// exactDot checks dot on one K-quant block blk of type typ (its float16
// scales set to 1 by the caller) against the sum written out element by
// element from tensor's decoder, with random activations −4..4 at scale
// 1: every term is a small integer, so the kernel must give it exactly.
func exactDot(t *testing.T, rng *rand.Rand, typ tensor.DType, blk []byte, dot func(row, xb []byte, nb int) float32) {
	t.Helper()
	xq := make([]byte, 8*xBlockBytes)
	xs := make([]int, 256)
	for j := 0; j < 8; j++ {
		binary.LittleEndian.PutUint32(xq[j*xBlockBytes:], 0x3f800000) // 1.0
		for l := 0; l < 32; l++ {
			v := rng.IntN(9) - 4
			xs[32*j+l] = v
			xq[j*xBlockBytes+4+l] = byte(int8(v))
		}
	}
	dec := make([]float32, 256)
	if err := tensor.Dequantize(typ, dec, blk); err != nil {
		t.Fatal(err)
	}
	var want float64
	for e, v := range dec {
		want += float64(v) * float64(xs[e])
	}
	if got := dot(blk, xq, 8); float64(got) != want {
		t.Fatalf("%s block % x: kernel gives %v, element by element %v", typ, blk, got, want)
	}
}

// q5kWeights returns rows×cols of Q5_K bytes, each superblock random or
// extreme in the ways kqWeights makes Q4_K ones, plus all fifth bits set
// or clear, the largest and smallest quants.
func q5kWeights(rng *rand.Rand, rows, cols int) *Matrix {
	rb, err := tensor.Q5_K.RowBytes(cols)
	if err != nil {
		panic(err)
	}
	data := make([]byte, rows*rb)
	size := tensor.Q5KBytes
	for off := 0; off < len(data); off += size {
		b := data[off : off+size]
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		switch rng.IntN(7) {
		case 0: // every scale and min 63
			for i := 4; i < 16; i++ {
				b[i] = 0xff
			}
		case 1: // all quants 31, scales and mins 63
			for i := 4; i < size; i++ {
				b[i] = 0xff
			}
		case 2: // all quants 0, scales and mins 63
			for i := 4; i < 16; i++ {
				b[i] = 0xff
			}
			clear(b[16:])
		case 3: // every scale 0 and min 63, or the reverse
			kqSetScales(b, rng.IntN(2) == 0)
		case 4: // fifth bits all set or all clear, low bits random
			v := byte(0)
			if rng.IntN(2) == 0 {
				v = 0xff
			}
			for i := 16; i < 48; i++ {
				b[i] = v
			}
		}
		binary.LittleEndian.PutUint16(b[0:], kqF16(rng))
		binary.LittleEndian.PutUint16(b[2:], kqF16(rng))
	}
	return &Matrix{Type: tensor.Q5_K, Rows: rows, Cols: cols, Data: data}
}

// The assembly kernels give dotQ5KGo's, dotQ3KGo's and dotQ2KGo's bits:
// every row count 1..9, token count 1..9, one to eight superblocks of
// extreme blocks (kqWeights), a matrix larger than a tile on a sub-range
// of rows, and real matrices through the pool.
func TestMoreKQuantsSIMDMatchesGo(t *testing.T) {
	needSIMD(t)
	rng := rand.New(rand.NewPCG(53, 54))
	kqSweep(t, rng, moreKTypes, kqCols, 1, 9)
	for _, typ := range moreKTypes {
		kqTiles(t, rng, kqWeights(rng, typ, 301, 1024), []int{1, 3, 6})
	}
	withKTypes(t, moreKTypes, TestKQuantSIMDPoolMatchesGo)
}
