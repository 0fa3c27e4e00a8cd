package kernels

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/bulkhead-llm/bulkhead/internal/tensor"
)

// Q3_K and Q2_K kernels against hand-made blocks, and the extreme blocks
// the SIMD tests draw (q5k_test.go runs them and the shared K-quant tests
// of kquant_test.go on these types).

var q23kTypes = []tensor.DType{tensor.Q3_K, tensor.Q2_K}

// The kernels on random blocks against a sum written out element by
// element from tensor's decoder (exactDot). A quant bit, a high bit or a
// scale read from the wrong place changes the sum.
func TestDotQ3KQ2KExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(61, 62))
	for trial := 0; trial < 50; trial++ {
		for _, typ := range q23kTypes {
			blk := make([]byte, typ.BlockBytes())
			for i := range blk {
				blk[i] = byte(rng.Uint32())
			}
			if typ == tensor.Q3_K {
				binary.LittleEndian.PutUint16(blk[108:], 0x3c00)
				exactDot(t, rng, typ, blk, dotQ3KGo)
				continue
			}
			binary.LittleEndian.PutUint16(blk[80:], 0x3c00)
			binary.LittleEndian.PutUint16(blk[82:], 0x3c00)
			exactDot(t, rng, typ, blk, dotQ2KGo)
		}
	}
}

// q23kWeights returns rows×cols of Q3_K or Q2_K bytes, each superblock
// random or extreme: every quant at its top or bottom level, the scales
// (and Q2_K's mins) at their extremes, high bits all set or all clear.
func q23kWeights(rng *rand.Rand, typ tensor.DType, rows, cols int) *Matrix {
	rb, err := typ.RowBytes(cols)
	if err != nil {
		panic(err)
	}
	data := make([]byte, rows*rb)
	size := typ.BlockBytes()
	fill := func(b []byte, v byte) {
		for i := range b {
			b[i] = v
		}
	}
	for off := 0; off < len(data); off += size {
		b := data[off : off+size]
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		ext := []byte{0x00, 0xff}[rng.IntN(2)]
		if typ == tensor.Q3_K {
			switch rng.IntN(6) {
			case 0: // quants all 7 (level 3) or all 0 (level −4)
				fill(b[:96], ext)
			case 1: // scales all −32 or all 31
				fill(b[96:108], ext)
			case 2: // level −4 and scale −32: the largest |S|
				fill(b[:108], 0)
			case 3: // high bits all set or all clear
				fill(b[:32], ext)
			}
			binary.LittleEndian.PutUint16(b[108:], kqF16(rng))
			continue
		}
		switch rng.IntN(5) {
		case 0: // quants all 3 or all 0
			fill(b[16:80], ext)
		case 1: // scales and mins all 15, or all 0
			fill(b[:16], ext)
		case 2: // quants 3 with scales and mins 15
			fill(b[:80], 0xff)
		case 3: // scales 15 and mins 0, or the reverse
			fill(b[:16], []byte{0x0f, 0xf0}[rng.IntN(2)])
		}
		binary.LittleEndian.PutUint16(b[80:], kqF16(rng))
		binary.LittleEndian.PutUint16(b[82:], kqF16(rng))
	}
	return &Matrix{Type: typ, Rows: rows, Cols: cols, Data: data}
}
