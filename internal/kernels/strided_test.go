package kernels

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/bulkhead-llm/bulkhead/internal/tensor"
)

// One to eight tokens of Q8_0, F32, F16 and BF16 weights over row ranges
// of every length mod 4 and at odd offsets, as pool chunks give them: the
// strided kernels (four streams of a quarter of the range, or of each
// tile for three Q8_0 tokens and two to seven of a plain type; for the
// plain types a multiple of 16 columns only) plus the adjacent
// kernels' remainder give the Go kernel's bits in every row of the range
// and write nothing outside it. A stream stored at the wrong row, a stride
// off by one row, a row's products in the wrong accumulator or a remainder
// left unwritten fails it.
func TestStridedMatchesGo(t *testing.T) { eachQ8Path(t, stridedMatchesGo) }

func stridedMatchesGo(t *testing.T) {
	needSIMD(t)
	rng := rand.New(rand.NewPCG(61, 62))
	for _, typ := range []tensor.DType{tensor.Q8_0, tensor.F32, tensor.F16, tensor.BF16} {
		for _, cols := range []int{32, 48, 768, 801} {
			if quantType(typ) && cols%32 != 0 {
				continue
			}
			w, _ := randMatrix(t, rng, typ, 301, cols)
			nb := cols / 32
			for n := 1; n <= 8; n++ {
				x := randFloats(rng, n*cols)
				xq := make([]byte, n*nb*xBlockBytes)
				for i := range n {
					quantizeX(xq[i*nb*xBlockBytes:], x[i*cols:(i+1)*cols])
				}
				for _, rg := range [][2]int{{0, 4}, {0, 5}, {5, 7}, {3, 10}, {1, 8}, {37, 290}, {290, 301}, {0, 301}, {16, 112}} {
					r0, r1 := rg[0], rg[1]
					got := make([]float32, n*w.Rows)
					want := make([]float32, n*w.Rows)
					for i := range got {
						got[i] = float32(math.NaN())
						want[i] = float32(math.NaN())
					}
					matRowsSIMD(w, r0, r1, x, xq, nil, n, got, w.Rows, nil)
					matRowsGo(w, r0, r1, x, xq, n, want, w.Rows)
					for i := range got {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
							t.Fatalf("%s %dx%d n=%d rows [%d, %d): token %d row %d is %g, the Go kernel gives %g",
								typ, w.Rows, cols, n, r0, r1, i/w.Rows, i%w.Rows, got[i], want[i])
						}
					}
				}
			}
		}
	}
}

// Where a weight and the activation it meets are both NaN, which payload
// survives depends on which is the multiply's first source: the strided
// kernels must take the weights first, as the one-row kernels and the Go
// kernel do, or a row's bits would depend on whether it ran strided (one
// token) or not (a batch).
func TestStridedNaNPayload(t *testing.T) {
	needSIMD(t)
	rng := rand.New(rand.NewPCG(63, 64))
	const rows, cols = 8, 32
	nanW := map[tensor.DType][]byte{
		tensor.F32:  {0x01, 0x00, 0xc0, 0x7f}, // 0x7fc00001
		tensor.F16:  {0x01, 0x7e},             // 0x7e01
		tensor.BF16: {0xc1, 0x7f},             // 0x7fc1
	}
	for typ, nan := range nanW {
		w, _ := randMatrix(t, rng, typ, rows, cols)
		rb, _ := typ.RowBytes(cols)
		for r := 0; r < rows; r += 2 {
			copy(w.Data[r*rb:], nan)
		}
		x := randFloats(rng, cols)
		x[0] = math.Float32frombits(0x7fc00002)
		got := make([]float32, rows)
		want := make([]float32, rows)
		matRowsSIMD(w, 0, rows, x, nil, nil, 1, got, rows, nil)
		matRowsGo(w, 0, rows, x, nil, 1, want, rows)
		for r := range got {
			if math.Float32bits(got[r]) != math.Float32bits(want[r]) {
				t.Fatalf("%s row %d: %#08x, the Go kernel gives %#08x", typ, r, math.Float32bits(got[r]), math.Float32bits(want[r]))
			}
		}
	}
}
