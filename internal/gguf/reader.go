package gguf

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"sort"

	"github.com/bulkhead-llm/bulkhead/internal/mmapfile"
	"github.com/bulkhead-llm/bulkhead/internal/tensor"
)

// magic is the first four bytes of every GGUF file.
const magic = "GGUF"

// DefaultAlignment is the tensor data alignment when a file has no
// general.alignment key.
const DefaultAlignment = 32

// AlignmentKey is the metadata key that sets the tensor data alignment.
const AlignmentKey = "general.alignment"

// maxAlignment bounds general.alignment. GGML uses 32 and writers rarely go
// past a page; the bound keeps offset arithmetic far from overflow.
const maxAlignment = 1 << 30

// Minimum encoded sizes, used to bound counts from the header before
// anything is allocated for them.
const (
	minKVBytes     = 8 + 4 + 1         // empty key, type, one-byte value
	minTensorBytes = 8 + 4 + 8 + 4 + 8 // empty name, n_dims, one dim, type, offset
)

// KV is one metadata entry. Value is one of uint8, int8, uint16, int16,
// uint32, int32, uint64, int64, float32, float64, bool, string, a slice of
// one of those, or []any whose elements are themselves such slices (an
// array of arrays).
type KV struct {
	Key   string
	Value any
}

// File is a parsed GGUF file. Its metadata is copied out of the file; its
// tensors' Data slices alias the file bytes (the mapping, for Open), so they
// are read-only and valid only until Close. A File is safe for concurrent
// reads; Close must not run concurrently with them.
type File struct {
	Path      string          // "" for Parse
	Version   uint32          // 2 or 3
	Alignment int             // tensor data alignment in bytes
	KVs       []KV            // file order
	Tensors   []tensor.Tensor // file order; Data aliases the file

	// DataOffset is where the tensor data section starts in the file.
	DataOffset int64

	kvIndex     map[string]int
	tensorIndex map[string]int
	mapping     *mmapfile.Map // what Open mapped; nil for Parse
}

// Mapping returns the bytes Open mapped, which the tensors' Data alias;
// nil for a File from Parse. A caller that recovers memory faults tells
// by it whether one was in this file (mmapfile.Fault).
func (f *File) Mapping() []byte { return f.mapping.Bytes() }

// FormatError reports bytes that are not a valid GGUF file.
type FormatError struct {
	Path string // "" for Parse
	Msg  string // the problem, with its numbers
}

// Error returns "gguf PATH: MSG", or "gguf: MSG" for Parse.
func (e *FormatError) Error() string { return prefix(e.Path) + e.Msg }

func prefix(path string) string {
	if path == "" {
		return "gguf: "
	}
	return "gguf " + path + ": "
}

// Parse reads a GGUF file held in memory. The returned tensors alias data,
// which must stay unchanged while they are in use. It validates everything
// Open does.
func Parse(data []byte) (*File, error) {
	return parse("", data)
}

// Close releases the file mapping. Tensor Data must not be used afterwards;
// Close clears the Data fields of f.Tensors so that mistakes show up as
// empty tensors rather than faults. Close is a no-op for Parse results and
// safe to call twice.
func (f *File) Close() error {
	if f.mapping == nil {
		return nil
	}
	m := f.mapping
	f.mapping = nil
	for i := range f.Tensors {
		f.Tensors[i].Data = nil
	}
	if err := m.Close(); err != nil {
		return fmt.Errorf("%sunmap: %w", prefix(f.Path), err)
	}
	return nil
}

// decoder is a bounds-checked little-endian cursor over the file bytes.
type decoder struct {
	path string
	data []byte
	off  int
}

func (d *decoder) errorf(format string, args ...any) error {
	return &FormatError{Path: d.path, Msg: fmt.Sprintf(format, args...)}
}

func (d *decoder) left() int { return len(d.data) - d.off }

// take returns the next n bytes, or a truncation error naming what they
// were to hold.
func (d *decoder) take(n int, what string) ([]byte, error) {
	if n < 0 || n > d.left() {
		return nil, d.errorf("truncated: %s needs %d bytes at offset %d, file is %d bytes", what, n, d.off, len(d.data))
	}
	b := d.data[d.off : d.off+n]
	d.off += n
	return b, nil
}

func (d *decoder) u32(what string) (uint32, error) {
	b, err := d.take(4, what)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(b), nil
}

func (d *decoder) u64(what string) (uint64, error) {
	b, err := d.take(8, what)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b), nil
}

// str reads a length-prefixed string, checking the length against the
// bytes left before copying.
func (d *decoder) str(what string) (string, error) {
	start := d.off
	n, err := d.u64(what + " length")
	if err != nil {
		return "", err
	}
	if n > uint64(d.left()) {
		return "", d.errorf("%s: string length %d at offset %d is more than the %d bytes left", what, n, start, d.left())
	}
	b, _ := d.take(int(n), what)
	return string(b), nil
}

// tensorInfo is a tensor description before its data is located.
type tensorInfo struct {
	name   string
	typ    tensor.DType
	shape  []int
	size   int    // data bytes
	offset uint64 // relative to the data section
}

func parse(path string, data []byte) (*File, error) {
	d := &decoder{path: path, data: data}
	f := &File{Path: path, Alignment: DefaultAlignment}

	m, err := d.take(4, "magic")
	if err != nil {
		return nil, err
	}
	if string(m) != magic {
		return nil, d.errorf("bad magic %q (0x%08x), want %q", m, binary.LittleEndian.Uint32(m), magic)
	}
	if f.Version, err = d.u32("version"); err != nil {
		return nil, err
	}
	switch v := f.Version; {
	case v == 2 || v == 3:
	case bits.ReverseBytes32(v) == 2 || bits.ReverseBytes32(v) == 3:
		return nil, d.errorf("unsupported version %d: a big-endian file (version %d byte-swapped); only little-endian is supported",
			v, bits.ReverseBytes32(v))
	default:
		return nil, d.errorf("unsupported version %d, want 2 or 3", v)
	}
	nTensors, err := d.u64("tensor count")
	if err != nil {
		return nil, err
	}
	nKVs, err := d.u64("metadata count")
	if err != nil {
		return nil, err
	}
	if nKVs > uint64(d.left()/minKVBytes) {
		return nil, d.errorf("header says %d keys, but only %d bytes follow (each key takes at least %d)", nKVs, d.left(), minKVBytes)
	}

	if err := f.readKVs(d, int(nKVs)); err != nil {
		return nil, err
	}
	if err := f.readAlignment(d); err != nil {
		return nil, err
	}

	if nTensors > uint64(d.left()/minTensorBytes) {
		return nil, d.errorf("header says %d tensors, but only %d bytes follow the metadata (each tensor description takes at least %d)",
			nTensors, d.left(), minTensorBytes)
	}
	infos, err := readTensorInfos(d, int(nTensors))
	if err != nil {
		return nil, err
	}

	// The data section starts at the first aligned offset after the
	// descriptions. In int64 this cannot overflow, even on 32-bit systems.
	a := int64(f.Alignment)
	f.DataOffset = (int64(d.off) + a - 1) / a * a
	if err := f.placeTensors(d, infos); err != nil {
		return nil, err
	}
	return f, nil
}

func (f *File) readKVs(d *decoder, n int) error {
	f.KVs = make([]KV, 0, n)
	f.kvIndex = make(map[string]int, n)
	for i := 0; i < n; i++ {
		start := d.off
		key, err := d.str(fmt.Sprintf("key %d name", i))
		if err != nil {
			return err
		}
		if j, dup := f.kvIndex[key]; dup {
			return d.errorf("duplicate key %q (entries %d and %d, offset %d)", key, j, i, start)
		}
		t, err := d.u32(fmt.Sprintf("value type of key %q", key))
		if err != nil {
			return err
		}
		v, err := d.readValue(valueType(t), key, 0)
		if err != nil {
			return err
		}
		f.kvIndex[key] = i
		f.KVs = append(f.KVs, KV{Key: key, Value: v})
	}
	return nil
}

func (f *File) readAlignment(d *decoder) error {
	v, ok := f.Get(AlignmentKey)
	if !ok {
		return nil
	}
	a, ok := integer(v)
	if !ok {
		return d.errorf("%s is %s, want an integer", AlignmentKey, describe(v))
	}
	if a.neg || a.mag == 0 || a.mag&(a.mag-1) != 0 {
		return d.errorf("%s %s is not a power of two", AlignmentKey, a)
	}
	if a.mag > maxAlignment {
		return d.errorf("%s %s is more than the supported %d", AlignmentKey, a, maxAlignment)
	}
	f.Alignment = int(a.mag)
	return nil
}

func readTensorInfos(d *decoder, n int) ([]tensorInfo, error) {
	infos := make([]tensorInfo, 0, n)
	seen := make(map[string]int, n)
	for i := 0; i < n; i++ {
		start := d.off
		name, err := d.str(fmt.Sprintf("tensor %d name", i))
		if err != nil {
			return nil, err
		}
		if j, dup := seen[name]; dup {
			return nil, d.errorf("duplicate tensor name %q (tensors %d and %d, offset %d)", name, j, i, start)
		}
		seen[name] = i
		ti, err := readTensorInfo(d, name)
		if err != nil {
			return nil, err
		}
		infos = append(infos, ti)
	}
	return infos, nil
}

func readTensorInfo(d *decoder, name string) (tensorInfo, error) {
	ti := tensorInfo{name: name}
	nd, err := d.u32(fmt.Sprintf("dimension count of tensor %q", name))
	if err != nil {
		return ti, err
	}
	if nd < 1 || nd > 4 {
		return ti, d.errorf("tensor %q has %d dimensions, want 1 to 4", name, nd)
	}
	ti.shape = make([]int, nd)
	elems := uint64(1)
	for k := range ti.shape {
		dim, err := d.u64(fmt.Sprintf("dimension %d of tensor %q", k, name))
		if err != nil {
			return ti, err
		}
		if dim == 0 {
			return ti, d.errorf("tensor %q dimension %d is 0", name, k)
		}
		hi, lo := bits.Mul64(elems, dim)
		if hi != 0 || lo > math.MaxInt {
			return ti, d.errorf("tensor %q: dimension %d (%d) makes the element count overflow", name, k, dim)
		}
		elems = lo
		ti.shape[k] = int(dim)
	}
	t, err := d.u32(fmt.Sprintf("type of tensor %q", name))
	if err != nil {
		return ti, err
	}
	ti.typ = tensor.DType(t)
	if !ti.typ.Known() {
		return ti, d.errorf("tensor %q has unknown tensor type %d", name, t)
	}
	bs, bb := uint64(ti.typ.BlockSize()), uint64(ti.typ.BlockBytes())
	if uint64(ti.shape[0])%bs != 0 {
		return ti, d.errorf("tensor %q: innermost dimension %d is not a multiple of the %s block size %d", name, ti.shape[0], ti.typ, bs)
	}
	hi, size := bits.Mul64(elems/bs, bb)
	if hi != 0 || size > math.MaxInt {
		return ti, d.errorf("tensor %q: %d elements of %s take more than %d bytes", name, elems, ti.typ, math.MaxInt)
	}
	ti.size = int(size)
	if ti.offset, err = d.u64(fmt.Sprintf("data offset of tensor %q", name)); err != nil {
		return ti, err
	}
	return ti, nil
}

// placeTensors checks that every tensor's data is aligned, inside the file
// and apart from the others, then slices it out of the file bytes.
func (f *File) placeTensors(d *decoder, infos []tensorInfo) error {
	type span struct{ start, end uint64 }
	spans := make([]span, len(infos))
	fileLen := uint64(len(d.data))
	for i, ti := range infos {
		if ti.offset%uint64(f.Alignment) != 0 {
			return d.errorf("tensor %q data offset %d is not a multiple of the alignment %d", ti.name, ti.offset, f.Alignment)
		}
		start, c1 := bits.Add64(uint64(f.DataOffset), ti.offset, 0)
		end, c2 := bits.Add64(start, uint64(ti.size), 0)
		if c1|c2 != 0 {
			return d.errorf("tensor %q data offset %d is past the end of the file (%d bytes)", ti.name, ti.offset, fileLen)
		}
		if end > fileLen {
			return d.errorf("tensor %q data ends at %d, file is %d bytes", ti.name, end, fileLen)
		}
		spans[i] = span{start, end}
	}
	order := make([]int, len(infos))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool { return spans[order[a]].start < spans[order[b]].start })
	for k := 1; k < len(order); k++ {
		p, q := order[k-1], order[k]
		if spans[q].start < spans[p].end {
			return d.errorf("tensors %q (bytes %d to %d) and %q (bytes %d to %d) overlap",
				infos[p].name, spans[p].start, spans[p].end, infos[q].name, spans[q].start, spans[q].end)
		}
	}
	f.Tensors = make([]tensor.Tensor, len(infos))
	f.tensorIndex = make(map[string]int, len(infos))
	for i, ti := range infos {
		s, e := int(spans[i].start), int(spans[i].end)
		f.Tensors[i] = tensor.Tensor{Name: ti.name, Type: ti.typ, Shape: ti.shape, Data: d.data[s:e:e]}
		f.tensorIndex[ti.name] = i
	}
	return nil
}
