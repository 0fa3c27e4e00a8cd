package tensor

import "fmt"

// Tensor is a named, typed view of weight bytes, usually memory-mapped from
// a model file. Shape is in GGML order: Shape[0] is the innermost (fastest
// varying) dimension, so a weight matrix with R rows of C columns has
// Shape = [C, R]. Data is never copied by the loaders; it aliases the file.
type Tensor struct {
	Name  string
	Type  DType
	Shape []int
	Data  []byte
}

// Elements is the product of the dimensions.
func (t *Tensor) Elements() int {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// Rows is the number of rows of a matrix view of t: every dimension but the
// innermost.
func (t *Tensor) Rows() int {
	if len(t.Shape) == 0 {
		return 1
	}
	return t.Elements() / t.Shape[0]
}

// Cols is the length of the innermost dimension.
func (t *Tensor) Cols() int {
	if len(t.Shape) == 0 {
		return 1
	}
	return t.Shape[0]
}

// Float32s decodes the whole tensor to float32. Use it for small tensors
// (norm weights, biases), never for weight matrices on the hot path.
func (t *Tensor) Float32s() ([]float32, error) {
	out := make([]float32, t.Elements())
	if err := Dequantize(t.Type, out, t.Data); err != nil {
		return nil, fmt.Errorf("tensor %q: %w", t.Name, err)
	}
	return out, nil
}
