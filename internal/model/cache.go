package model

import "fmt"

// Span is a run of consecutive positions of one layer's keys and values,
// laid out token-major in storage words (see KVType): with w =
// Type.Words(KVDim) words per token, K[t*w:(t+1)*w] is the key of the
// span's t-th token. K and V always have the same length.
type Span struct {
	K, V []float32
	Type KVType
}

// Tokens is the number of positions the span holds.
func (s Span) Tokens(kvDim int) int { return len(s.K) / s.Type.Words(kvDim) }

// SeqCache is one sequence's key/value storage as the forward pass sees it.
//
// The model only ever writes the slot for a position it is computing and
// reads back positions [0, n) of the same sequence; it never learns where
// the storage lives. That is the seam where package kv puts paged,
// owner-tagged pages: Spans returns one Span per page and checks the page's
// owner tag once per page, so a stale or foreign page fails the request
// instead of feeding attention.
type SeqCache interface {
	// KVType is the element type the cache stores.
	KVType() KVType
	// Slot returns the storage for the key and value of position pos in
	// layer, each KVType().Words(KVDim) words, for the forward pass to
	// fill.
	Slot(layer, pos int) (k, v []float32, err error)
	// Spans appends to dst the stored keys and values of positions [0, n) of
	// layer, in position order, and returns the extended slice.
	Spans(dst []Span, layer, n int) ([]Span, error)
}

// KVSealer is a SeqCache that keeps a checksum of every stored key and
// value vector (kv.Seq in a pool with Checksums, on a prefill server,
// whose KV transfer then need not read the vectors again to checksum
// them). Seal tells it that the forward pass has finished writing
// positions [from, to) of layer, so it can take them while they are still
// in cache.
type KVSealer interface {
	Seal(layer, from, to int) error
}

// DenseCache is a SeqCache over one contiguous buffer: the simplest storage,
// used by `bulkhead generate` and as the reference that paged storage must
// agree with bit for bit.
type DenseCache struct {
	typ             KVType
	kvDim, capacity int       // kvDim in storage words
	k, v            []float32 // [layer][pos][kvDim words]
}

// NewDenseCache returns float32 storage for up to capacity positions of a
// model with the given shape.
func NewDenseCache(c *Config, capacity int) *DenseCache {
	d, err := NewDenseCacheOf(c, capacity, KVF32)
	if err != nil {
		panic(err) // f32 fits every layout
	}
	return d
}

// NewDenseCacheOf returns storage of element type t for up to capacity
// positions of a model with the given shape.
func NewDenseCacheOf(c *Config, capacity int, t KVType) (*DenseCache, error) {
	if err := CheckKVLayout(t, c.KVDim()); err != nil {
		return nil, err
	}
	w := t.Words(c.KVDim())
	n := c.Layers * capacity * w
	return &DenseCache{typ: t, kvDim: w, capacity: capacity, k: make([]float32, n), v: make([]float32, n)}, nil
}

// KVType implements SeqCache.
func (d *DenseCache) KVType() KVType { return d.typ }

// Capacity is the number of positions the cache can hold.
func (d *DenseCache) Capacity() int { return d.capacity }

// Slot implements SeqCache.
func (d *DenseCache) Slot(layer, pos int) (k, v []float32, err error) {
	if pos < 0 || pos >= d.capacity {
		return nil, nil, fmt.Errorf("kv cache: position %d outside capacity %d", pos, d.capacity)
	}
	off := (layer*d.capacity + pos) * d.kvDim
	return d.k[off : off+d.kvDim], d.v[off : off+d.kvDim], nil
}

// Spans implements SeqCache.
func (d *DenseCache) Spans(dst []Span, layer, n int) ([]Span, error) {
	if n < 0 || n > d.capacity {
		return dst, fmt.Errorf("kv cache: %d positions requested, capacity %d", n, d.capacity)
	}
	off := layer * d.capacity * d.kvDim
	return append(dst, Span{K: d.k[off : off+n*d.kvDim], V: d.v[off : off+n*d.kvDim], Type: d.typ}), nil
}
