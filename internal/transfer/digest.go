package transfer

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"runtime"
	"sync"

	"github.com/bulkhead-llm/bulkhead/internal/model"
)

// KVReader reads the KV of tokens [from, to) of one layer into k and v
// ([token][kvdim] each). kv.Seq and kv.Lease implement it.
type KVReader interface {
	ReadTokens(layer, from, to int, k, v []float32) error
}

// KVWriter writes the KV of tokens [from, to) of one layer. kv.Seq
// implements it.
type KVWriter interface {
	WriteTokens(layer, from, to int, k, v []float32) error
}

// digestChunk is how many tokens Digest reads per call.
const digestChunk = 64

// Digest summarises the KV of tokens [0, n) in token order. Each token's
// KV (for layer in 0..layers-1: the kvdim floats of K, then of V, float32
// little-endian) is checksummed with CRC32C, and the digest is the SHA-256
// of a header (n, layers, kvdim) followed by the n checksums in token
// order. It reads through r, so it depends on values and their token
// positions only, never on which pages hold them.
//
// Why not SHA-256 over every byte: the digest is an end-to-end check that
// decode's pages hold exactly what prefill computed (missing, duplicated,
// misplaced or stale writes), not an authenticator: peers are already
// authenticated and the wire already carries a CRC32C per frame. CRC32C
// runs at memory speed with SSE4.2, where SHA-256 over 38 MB of KV (a
// 512-token prompt of a 110M model) would cost more than the transfer.
//
// When r can show its pages in place (kv.Seq and kv.Lease have Spans),
// Digest checksums them there instead of copying them out first: same
// result, one pass over the KV instead of two; and a large prompt's pages
// are split among up to GOMAXPROCS goroutines, since verification is the
// last step before the sequence is Ready and nothing else of the transfer
// runs meanwhile.
func Digest(r KVReader, n, layers, kvdim int) ([32]byte, error) {
	workers := runtime.GOMAXPROCS(0)
	if n*layers*kvdim*8 < digestSplit {
		workers = 1
	}
	return digest(r, n, layers, kvdim, workers)
}

// digestSplit is the KV size (bytes) from which digest splits the work:
// below it, starting goroutines costs more than it saves.
const digestSplit = 4 << 20

// digest is Digest with at most workers goroutines.
func digest(r KVReader, n, layers, kvdim, workers int) ([32]byte, error) {
	var sums []byte
	var err error
	if sp, ok := r.(kvSpanner); ok && nativeLittleEndian {
		sums, err = spanSums(sp, n, layers, kvdim, workers)
	} else {
		sums, err = copySums(r, n, layers, kvdim)
	}
	if err != nil {
		return [32]byte{}, err
	}
	return digestOf(n, layers, kvdim, sums), nil
}

// digestOf is Digest from the per-token checksums (4 bytes each, in
// token order).
func digestOf(n, layers, kvdim int, sums []byte) [32]byte {
	h := sha256.New()
	var hdr [24]byte
	binary.LittleEndian.PutUint64(hdr[0:], uint64(n))
	binary.LittleEndian.PutUint64(hdr[8:], uint64(layers))
	binary.LittleEndian.PutUint64(hdr[16:], uint64(kvdim))
	h.Write(hdr[:])
	h.Write(sums)
	var sum [32]byte
	h.Sum(sum[:0])
	return sum
}

// copySums computes the per-token checksums by reading the KV out
// through r, digestChunk tokens at a time.
func copySums(r KVReader, n, layers, kvdim int) ([]byte, error) {
	chunk := min(n, digestChunk)
	k := make([]float32, layers*chunk*kvdim)
	v := make([]float32, layers*chunk*kvdim)
	buf := make([]byte, 8*kvdim)
	sums := make([]byte, 0, 4*n)
	for from := 0; from < n; from += chunk {
		to := min(n, from+chunk)
		span := (to - from) * kvdim
		for l := range layers {
			if err := r.ReadTokens(l, from, to, k[l*span:(l+1)*span], v[l*span:(l+1)*span]); err != nil {
				return nil, fmt.Errorf("digest: read tokens [%d, %d) of layer %d: %w", from, to, l, err)
			}
		}
		for t := range to - from {
			var crc uint32
			for l := range layers {
				off := l*span + t*kvdim
				if nativeLittleEndian {
					crc = crc32.Update(crc, castagnoli, floatBytes(k[off:off+kvdim]))
					crc = crc32.Update(crc, castagnoli, floatBytes(v[off:off+kvdim]))
					continue
				}
				PutFloats(buf, k[off:off+kvdim])
				PutFloats(buf[4*kvdim:], v[off:off+kvdim])
				crc = crc32.Update(crc, castagnoli, buf)
			}
			sums = binary.LittleEndian.AppendUint32(sums, crc)
		}
	}
	return sums, nil
}

// kvSpanner is a KVReader that can also lend its pages for reading in
// place, one Span per page of positions [0, n) of a layer (kv.Seq,
// kv.Lease).
type kvSpanner interface {
	Spans(dst []model.Span, layer, n int) ([]model.Span, error)
}

// spanSums computes the per-token checksums over pages read in place (on
// a little-endian host, where memory is the wire encoding), the pages
// split among at most workers goroutines.
func spanSums(r kvSpanner, n, layers, kvdim, workers int) ([]byte, error) {
	spans := make([][]model.Span, layers)
	for l := range layers {
		s, err := r.Spans(nil, l, n)
		if err != nil {
			return nil, fmt.Errorf("digest: read tokens [0, %d) of layer %d: %w", n, l, err)
		}
		spans[l] = s
	}
	// Span j covers the same positions in every layer (one page each), so
	// token i of span j is the same token in all of them. first[j] is the
	// span's first token.
	pages := len(spans[0])
	first := make([]int, pages+1)
	for j := range pages {
		cnt := len(spans[0][j].K) / kvdim
		for l := range layers {
			if len(spans[l]) != pages {
				return nil, fmt.Errorf("digest: layer %d has %d pages, layer 0 %d", l, len(spans[l]), pages)
			}
			if sp := spans[l][j]; len(sp.K) != cnt*kvdim || len(sp.V) != cnt*kvdim {
				return nil, fmt.Errorf("digest: page %d of layer %d does not line up with layer 0's", j, l)
			}
		}
		first[j+1] = first[j] + cnt
	}
	if first[pages] != n {
		return nil, fmt.Errorf("digest: pages hold %d of %d tokens", first[pages], n)
	}
	sums := make([]byte, 4*n)
	// Last page first: the pages written last are the likeliest still in
	// cache when verification follows the transfer.
	sumPages := func(from, to int) {
		for j := to - 1; j >= from; j-- {
			for i := range first[j+1] - first[j] {
				var crc uint32
				for l := range layers {
					sp := spans[l][j]
					crc = crc32.Update(crc, castagnoli, floatBytes(sp.K[i*kvdim:(i+1)*kvdim]))
					crc = crc32.Update(crc, castagnoli, floatBytes(sp.V[i*kvdim:(i+1)*kvdim]))
				}
				binary.LittleEndian.PutUint32(sums[4*(first[j]+i):], crc)
			}
		}
	}
	workers = max(1, min(workers, pages))
	var wg sync.WaitGroup
	for w := 1; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sumPages(w*pages/workers, (w+1)*pages/workers)
		}()
	}
	sumPages(0, pages/workers)
	wg.Wait()
	return sums, nil
}

// Apply carries out w against dst, one WriteTokens call per layer. kvdim
// must be the sequence's; the Data length was checked by the Receiver.
// Apply then gives back the pooled buffer Data may alias (bufpool.go):
// w.Data must not be read afterwards, and a second Apply of the same
// action fails rather than copy a recycled buffer.
func (w WriteKV) Apply(dst KVWriter, kvdim int) error { return w.apply(dst, kvdim, nil) }

// apply is Apply, calling then (when not nil) after each layer is
// written, while that layer's pages are still in cache.
func (w WriteKV) apply(dst KVWriter, kvdim int, then func(layer int) error) error {
	return w.each(kvdim, func(l int, k, v []float32) error {
		if err := dst.WriteTokens(l, w.TokFrom, w.TokTo, k, v); err != nil {
			return err
		}
		if then != nil {
			return then(l)
		}
		return nil
	})
}

// each calls write for every layer of w with that layer's K and V from
// Data, then gives back the pooled buffer Data may alias. An error from
// write ends it, naming the frame and the layer.
func (w WriteKV) each(kvdim int, write func(layer int, k, v []float32) error) error {
	if !w.buf.live() {
		return fmt.Errorf("transfer write %d: the frame's buffer was already given back (WriteKV applied twice?)", w.Seq)
	}
	defer w.buf.put()
	span := (w.TokTo - w.TokFrom) * kvdim
	if want := 2 * span * (w.LayerTo - w.LayerFrom); len(w.Data) != want {
		return fmt.Errorf("transfer write %d: %d floats, ranges need %d", w.Seq, len(w.Data), want)
	}
	for i, l := 0, w.LayerFrom; l < w.LayerTo; i, l = i+1, l+1 {
		base := 2 * span * i
		if err := write(l, w.Data[base:base+span], w.Data[base+span:base+2*span]); err != nil {
			return fmt.Errorf("transfer write %d: layer %d tokens [%d, %d): %w", w.Seq, l, w.TokFrom, w.TokTo, err)
		}
	}
	return nil
}
