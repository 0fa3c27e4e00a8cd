package transfer

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash/crc32"
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
func Digest(r KVReader, n, layers, kvdim int) ([32]byte, error) {
	h := sha256.New()
	var hdr [24]byte
	binary.LittleEndian.PutUint64(hdr[0:], uint64(n))
	binary.LittleEndian.PutUint64(hdr[8:], uint64(layers))
	binary.LittleEndian.PutUint64(hdr[16:], uint64(kvdim))
	h.Write(hdr[:])
	chunk := min(n, digestChunk)
	k := make([]float32, layers*chunk*kvdim)
	v := make([]float32, layers*chunk*kvdim)
	buf := make([]byte, 8*kvdim)
	sums := make([]byte, 4*chunk)
	for from := 0; from < n; from += chunk {
		to := min(n, from+chunk)
		span := (to - from) * kvdim
		for l := range layers {
			if err := r.ReadTokens(l, from, to, k[l*span:(l+1)*span], v[l*span:(l+1)*span]); err != nil {
				return [32]byte{}, fmt.Errorf("digest: read tokens [%d, %d) of layer %d: %w", from, to, l, err)
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
			binary.LittleEndian.PutUint32(sums[4*t:], crc)
		}
		h.Write(sums[:4*(to-from)])
	}
	var sum [32]byte
	h.Sum(sum[:0])
	return sum, nil
}

// Apply carries out w against dst, one WriteTokens call per layer. kvdim
// must be the sequence's; the Data length was checked by the Receiver.
func (w WriteKV) Apply(dst KVWriter, kvdim int) error {
	span := (w.TokTo - w.TokFrom) * kvdim
	if want := 2 * span * (w.LayerTo - w.LayerFrom); len(w.Data) != want {
		return fmt.Errorf("transfer write %d: %d floats, ranges need %d", w.Seq, len(w.Data), want)
	}
	for i, l := 0, w.LayerFrom; l < w.LayerTo; i, l = i+1, l+1 {
		base := 2 * span * i
		if err := dst.WriteTokens(l, w.TokFrom, w.TokTo, w.Data[base:base+span], w.Data[base+span:base+2*span]); err != nil {
			return fmt.Errorf("transfer write %d: layer %d tokens [%d, %d): %w", w.Seq, l, w.TokFrom, w.TokTo, err)
		}
	}
	return nil
}
