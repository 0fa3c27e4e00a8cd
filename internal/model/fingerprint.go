package model

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"

	"github.com/bulkhead-llm/bulkhead/internal/kernels"
)

// Fingerprint identifies the model by its weights and configuration: a
// SHA-256 over the architecture and every weight's type, shape and bytes,
// in a fixed order. Prefill and decode peers compare fingerprints at
// handshake, because KV computed by one model is garbage to another. It is
// computed once (hashing reads every weight) and cached.
func (m *Model) Fingerprint() string {
	m.fpOnce.Do(func() {
		h := sha256.New()
		c := &m.Config
		fmt.Fprintf(h, "bulkhead-model-v1\x00%s\x00%d %d %d %d %d %d %d %d\x00%g %d %d %g %v\x00%g %v %v\x00",
			c.Arch, c.Dim, c.Hidden, c.Layers, c.Heads, c.KVHeads, c.HeadDim, c.Vocab, c.ContextLen,
			c.RopeTheta, c.RopeStyle, c.RopeDim, c.RopeScale, c.RopeFreqFactors, c.NormEps, c.QKVBias, c.TiedOutput)
		mat := func(w *kernels.Matrix) {
			var hdr [24]byte
			binary.LittleEndian.PutUint64(hdr[0:], uint64(w.Type))
			binary.LittleEndian.PutUint64(hdr[8:], uint64(w.Rows))
			binary.LittleEndian.PutUint64(hdr[16:], uint64(w.Cols))
			h.Write(hdr[:])
			h.Write(w.Data)
		}
		vec := func(v []float32) {
			b := make([]byte, 4*len(v)+8)
			binary.LittleEndian.PutUint64(b, uint64(len(v)))
			for i, x := range v {
				binary.LittleEndian.PutUint32(b[8+4*i:], math.Float32bits(x))
			}
			h.Write(b)
		}
		mat(&m.Embed)
		for i := range m.Layers {
			l := &m.Layers[i]
			vec(l.AttnNorm)
			for _, w := range []*kernels.Matrix{&l.Q, &l.K, &l.V, &l.O} {
				mat(w)
			}
			vec(l.QBias)
			vec(l.KBias)
			vec(l.VBias)
			vec(l.FFNNorm)
			for _, w := range []*kernels.Matrix{&l.Gate, &l.Up, &l.Down} {
				mat(w)
			}
		}
		vec(m.OutNorm)
		if !c.TiedOutput {
			mat(&m.Output)
		}
		m.fp = hex.EncodeToString(h.Sum(nil))
	})
	return m.fp
}
