package engine

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"testing"

	"github.com/bulkhead-llm/bulkhead/internal/errkind"
	"github.com/bulkhead-llm/bulkhead/internal/kv"
	"github.com/bulkhead-llm/bulkhead/internal/model"
	"github.com/bulkhead-llm/bulkhead/internal/sample"
)

// TestPrefillHandoffThenDecode runs the two halves of disaggregated serving
// on two engines with separate pools: Prefill computes the prompt's KV and
// first token, the KV is copied token by token into a page table of the
// decode pool, and SubmitPrefilled continues. The text must equal the
// request run alone, greedy and sampled, and both pools must end free.
func TestPrefillHandoffThenDecode(t *testing.T) {
	m := stories(t)
	pre := startEngine(t, m, 32, 16, Config{BatchTokens: 64, MaxRunning: 4})
	dec := startEngine(t, m, 32, 16, Config{BatchTokens: 64, MaxRunning: 4})
	c := &m.Config
	// The decode engine resumes the prefill's sampler: its random stream,
	// and the first token counted towards the penalties (the last prompt
	// makes that token " the", which the text would repeat).
	for _, x := range []struct {
		p    sample.Params
		text string
	}{
		{sample.Params{}, "Lily and Tom went to the park. They saw a big dog"},
		{sample.Params{Temperature: 0.9, TopP: 0.95, Seed: 11}, "Lily and Tom went to the park. They saw a big dog"},
		{sample.Params{PresencePenalty: 2, FrequencyPenalty: 1}, "Once upon a time, there was a little girl named Lily. She went to"},
	} {
		p := x.p
		prompt := m.Tokenizer.Encode(x.text, true)
		const maxTokens = 60
		want := solo(t, m, prompt, maxTokens, p)
		a := admit(t, pre.e, Request{Tenant: "acme", Prompt: prompt, MaxTokens: maxTokens, Sampling: p})

		st, err := pre.e.Prefill(context.Background(), a)
		if err != nil {
			t.Fatal(err)
		}
		toks, res, err := collect(context.Background(), st)
		if err != nil || res.Err != nil || len(toks) != 0 || res.Handoff == nil {
			t.Fatalf("prefill: tokens %v, result %+v, err %v", toks, res, err)
		}
		h := res.Handoff
		if h.Tokens != len(prompt) || h.FirstToken != want[0] {
			t.Fatalf("handoff covers %d tokens with first token %d; want %d and %d", h.Tokens, h.FirstToken, len(prompt), want[0])
		}
		seq, err := dec.pool.Alloc(kv.Owner{Tenant: "acme", Request: 99}, len(prompt)+maxTokens)
		if err != nil {
			t.Fatal(err)
		}
		copyKV(t, c.Layers, c.KVDim(), h.Lease, seq, len(prompt))
		ds, err := dec.e.SubmitPrefilled(context.Background(), a, seq, h.FirstToken)
		if err != nil {
			t.Fatal(err)
		}
		got, res, err := collect(context.Background(), ds)
		if err != nil || res.Err != nil {
			t.Fatalf("decode: %v %v", err, res.Err)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("params %+v: disaggregated output differs from solo:\n got %v\nwant %v", p, got, want)
		}
		if res.Usage.PromptTokens != len(prompt) || res.Usage.CompletionTokens != len(want) {
			t.Fatalf("usage %+v", res.Usage)
		}
	}
	waitIdle(t, pre)
	waitIdle(t, dec)
	for name, h := range map[string]*harness{"prefill": pre, "decode": dec} {
		if st := h.pool.Stats(); st.Free != 32 || st.Leases != 0 {
			t.Errorf("%s pool after the requests: %+v", name, st)
		}
	}
}

// TestPrefillKeepsSums: in a pool that keeps checksums (a prefill
// server's), the forward pass seals every vector it writes, through
// chunked prefill, so the handoff's lease reports the CRC32C of each K and
// V vector of the prompt, in both cache types, and the transfer never
// reads the KV to checksum it.
func TestPrefillKeepsSums(t *testing.T) {
	m := stories(t)
	c := &m.Config
	for _, kvt := range []model.KVType{model.KVF32, model.KVF16} {
		pc := kv.ConfigFor(c, 32, 16)
		pc.Type, pc.Checksums = kvt, true
		pre := startEnginePool(t, m, pc, Config{BatchTokens: 16, MaxRunning: 4})
		prompt := m.Tokenizer.Encode("Lily and Tom went to the park. They saw a big dog that ran after a red ball", true)
		a := admit(t, pre.e, Request{Tenant: "acme", Prompt: prompt, MaxTokens: 8})
		st, err := pre.e.Prefill(context.Background(), a)
		if err != nil {
			t.Fatal(err)
		}
		_, res, err := collect(context.Background(), st)
		if err != nil || res.Err != nil || res.Handoff == nil {
			t.Fatalf("prefill: %+v, %v", res, err)
		}
		h, n, w := res.Handoff, len(prompt), pc.RowWords()
		kd, vd := make([]float32, n*w), make([]float32, n*w)
		ks, vs := make([]uint32, n), make([]uint32, n)
		for l := range c.Layers {
			if !h.Lease.Sums(l, 0, n, ks, vs) {
				t.Fatalf("%v: layer %d of the prompt was not sealed", kvt, l)
			}
			if err := h.Lease.ReadTokens(l, 0, n, kd, vd); err != nil {
				t.Fatal(err)
			}
			for i := range n {
				if ks[i] != crc32c(kd[i*w:(i+1)*w]) || vs[i] != crc32c(vd[i*w:(i+1)*w]) {
					t.Fatalf("%v: layer %d token %d: kept checksum is not its vector's", kvt, l, i)
				}
			}
		}
		h.Lease.Release()
		waitIdle(t, pre)
	}
}

// crc32c is the CRC32C of f's words, little-endian.
func crc32c(f []float32) uint32 {
	b := make([]byte, 4*len(f))
	for i, x := range f {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli))
}

// TestSubmitPrefilledRefusesKV: a sequence that does not hold the whole
// prompt, or that was allocated for another tenant though it holds the
// whole prompt's KV, never starts decoding; it is freed, and the error
// says which.
func TestSubmitPrefilledRefusesKV(t *testing.T) {
	m := stories(t)
	for _, tc := range []struct {
		name, tenant string
		written      int // prompt tokens whose KV arrived; -1: all
		code         string
	}{
		{"short", "acme", 1, "kv_incomplete"},
		{"another tenant's", "globex", -1, "kv_foreign"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dec := startEngine(t, m, 32, 16, Config{BatchTokens: 64, MaxRunning: 4})
			prompt := m.Tokenizer.Encode("Once upon a time", true)
			a := admit(t, dec.e, Request{Tenant: "acme", Prompt: prompt, MaxTokens: 10})
			seq, err := dec.pool.Alloc(kv.Owner{Tenant: tc.tenant, Request: 1}, len(prompt)+10)
			if err != nil {
				t.Fatal(err)
			}
			n := tc.written
			if n < 0 {
				n = len(prompt)
			}
			k := make([]float32, n*m.Config.KVDim())
			for l := 0; l < m.Config.Layers; l++ {
				if err := seq.WriteTokens(l, 0, n, k, k); err != nil {
					t.Fatal(err)
				}
			}
			_, err = dec.e.SubmitPrefilled(context.Background(), a, seq, 5)
			if e := errkind.Of(err); err == nil || e.Code != tc.code {
				t.Fatalf("SubmitPrefilled of %s's KV of %d of %d tokens for acme: %v; want %s", tc.tenant, n, len(prompt), err, tc.code)
			}
			if st := dec.pool.Stats(); st.Free != 32 {
				t.Fatalf("refused sequence was not freed: %+v", st)
			}
		})
	}
}
