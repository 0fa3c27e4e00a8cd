package convert

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/bulkhead-llm/bulkhead/internal/tensor"
)

// chunk is how many values a recoder decodes at a time: a multiple of
// every block size (256 for the K-quants), so chunks hold whole blocks,
// and small enough that the float32 copy is negligible next to a weight
// matrix (the token embeddings of a 32000-word, 2048-wide model are 256 MB
// of float32; a copy of all of them used to be made).
const chunk = 1 << 16

// recoder converts F32 tensor data to other types, reusing its buffers
// from one tensor to the next.
type recoder struct {
	vals []float32 // one chunk of decoded values
	out  []byte    // the converted tensor
}

// recode returns src, the F32 bytes of a tensor shaped as dst, encoded as
// dst.Type. The result is src itself for F32 and otherwise rc's buffer,
// valid until the next call. Non-finite weights are refused, as are
// finite ones the type cannot hold (beyond F16's 65504, or whose block's
// float16 scale would overflow): llama.cpp refuses to write such blocks,
// and every value decoded from them would be NaN or infinite.
func (rc *recoder) recode(dst *tensor.Tensor, src []byte) ([]byte, error) {
	dt, n := dst.Type, dst.Elements()
	if len(src) != 4*n {
		return nil, fmt.Errorf("convert: tensor %q: shape %v needs %d bytes of F32, got %d", dst.Name, dst.Shape, 4*n, len(src))
	}
	if bs := dt.BlockSize(); bs == 0 || dst.Shape[0]%bs != 0 {
		return nil, fmt.Errorf("convert: tensor %q: rows of %d values cannot be written as %s (block size %d)", dst.Name, dst.Shape[0], dt, bs)
	}
	if dt == tensor.F32 {
		if i := tensor.FirstNonFinite(tensor.F32, src, n); i >= 0 {
			return nil, nonFinite(dst, i, f32At(src, i))
		}
		return src, nil
	}
	size, err := dt.RowBytes(n)
	if err != nil {
		return nil, fmt.Errorf("convert: tensor %q: %w", dst.Name, err)
	}
	if cap(rc.out) < size {
		rc.out = make([]byte, size)
	}
	out := rc.out[:size]
	if rc.vals == nil {
		rc.vals = make([]float32, chunk)
	}
	bs, bb := dt.BlockSize(), dt.BlockBytes()
	for off := 0; off < n; off += chunk {
		vals := rc.vals[:min(chunk, n-off)]
		if err := tensor.Dequantize(tensor.F32, vals, src[4*off:4*(off+len(vals))]); err != nil {
			return nil, fmt.Errorf("convert: tensor %q: %w", dst.Name, err)
		}
		for i, v := range vals {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return nil, nonFinite(dst, off+i, v)
			}
		}
		enc := out[off/bs*bb : (off+len(vals))/bs*bb]
		if err := tensor.Quantize(dt, enc, vals); err != nil {
			return nil, fmt.Errorf("convert: tensor %q: %w", dst.Name, err)
		}
		if i := tensor.FirstNonFinite(dt, enc, len(vals)); i >= 0 {
			return nil, overflow(dst, off+i, vals[i:i+bs])
		}
	}
	return out, nil
}

// f32At is value i of little-endian F32 bytes.
func f32At(b []byte, i int) float32 {
	return math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
}

// at names element i of t as a row and column of its matrix view.
func at(t *tensor.Tensor, i int) string {
	if len(t.Shape) < 2 {
		return fmt.Sprintf("element %d", i)
	}
	return fmt.Sprintf("row %d, column %d", i/t.Shape[0], i%t.Shape[0])
}

// nonFinite reports the NaN or infinite weight v at element i of t.
func nonFinite(t *tensor.Tensor, i int, v float32) error {
	return fmt.Errorf("convert: tensor %q: weight at %s is %v; the checkpoint is corrupt (a diverged or damaged training run?)", t.Name, at(t, i), v)
}

// overflow reports that the block of t starting at element i (one value
// for F16 and BF16) cannot be encoded finitely.
func overflow(t *tensor.Tensor, i int, block []float32) error {
	var amax float32
	for _, v := range block {
		amax = max(amax, float32(math.Abs(float64(v))))
	}
	if len(block) == 1 {
		return fmt.Errorf("convert: tensor %q: weight at %s is %v, beyond what %s can hold; write f32 or bf16", t.Name, at(t, i), block[0], t.Type)
	}
	return fmt.Errorf("convert: tensor %q: the %s block at %s holds weights up to %g, too large for its float16 scale; write f32 or bf16", t.Name, t.Type, at(t, i), amax)
}
