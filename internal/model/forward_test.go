package model_test

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/bulkhead-llm/bulkhead/internal/convert"
	"github.com/bulkhead-llm/bulkhead/internal/gguf"
	"github.com/bulkhead-llm/bulkhead/internal/kernels"
	"github.com/bulkhead-llm/bulkhead/internal/model"
	"github.com/bulkhead-llm/bulkhead/internal/tensor"
)

// randomModel builds a random-weight model of the given shape in memory,
// through the same GGUF writer and loader a file would go through.
func randomModel(t testing.TB, s convert.Shape, dt tensor.DType) *model.Model {
	t.Helper()
	cm, err := convert.Random(s, 7)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := convert.WriteGGUF(&buf, cm, dt); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.FromGGUF(f)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// logitsAlone runs one sequence's tokens alone, one token per forward
// pass, and returns the logits after each token.
func logitsAlone(t testing.TB, m *model.Model, threads *kernels.Pool, tokens []int, kvt model.KVType) [][]float32 {
	r := m.NewRunner(threads, 1, 0)
	cache, err := model.NewDenseCacheOf(&m.Config, len(tokens), kvt)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]float32
	for i, tok := range tokens {
		l := make([]float32, m.Config.Vocab)
		s := &model.Seq{Tokens: []int{tok}, Pos: i, Cache: cache, Logits: l}
		if err := r.Forward([]*model.Seq{s}); err != nil {
			t.Fatal(err)
		}
		out = append(out, l)
	}
	return out
}

// checkBatchInvariance runs several sequences of different lengths in
// mixed batches (prompt chunks beside single decode tokens, at different
// positions, with different thread counts) and requires every logit to be
// bit-for-bit what the sequence produced alone.
func checkBatchInvariance(t *testing.T, m *model.Model, nseq, length int, kvt model.KVType) {
	rng := rand.New(rand.NewPCG(3, 4))
	seqs := make([][]int, nseq)
	for i := range seqs {
		n := length/2 + rng.IntN(length/2)
		seqs[i] = make([]int, n)
		for j := range seqs[i] {
			seqs[i][j] = 3 + rng.IntN(m.Config.Vocab-3)
		}
	}
	one := kernels.NewPool(1)
	defer one.Close()
	want := make([][][]float32, nseq)
	for i, s := range seqs {
		want[i] = logitsAlone(t, m, one, s, kvt)
	}
	for _, threads := range []int{1, 2} {
		pool := kernels.NewPool(threads)
		r := m.NewRunner(pool, 64, 0)
		caches := make([]*model.DenseCache, nseq)
		fed := make([]int, nseq)
		for i := range caches {
			var err error
			if caches[i], err = model.NewDenseCacheOf(&m.Config, len(seqs[i]), kvt); err != nil {
				t.Fatal(err)
			}
		}
		for step := 0; ; step++ {
			var batch []*model.Seq
			var owner []int
			budget := 64
			for i, s := range seqs {
				left := len(s) - fed[i]
				if left == 0 || budget == 0 {
					continue
				}
				// Vary chunk sizes so a sequence meets different neighbours
				// and batch sizes at every position.
				c := min(left, budget, 1+rng.IntN(9))
				batch = append(batch, &model.Seq{Tokens: s[fed[i] : fed[i]+c], Pos: fed[i], Cache: caches[i], Logits: make([]float32, m.Config.Vocab)})
				owner = append(owner, i)
				budget -= c
			}
			if len(batch) == 0 {
				break
			}
			if err := r.Forward(batch); err != nil {
				t.Fatal(err)
			}
			for k, b := range batch {
				i := owner[k]
				fed[i] += len(b.Tokens)
				if diff := firstDiff(b.Logits, want[i][fed[i]-1]); diff != "" {
					t.Fatalf("threads=%d: sequence %d at position %d (chunk of %d in a batch of %d sequences): %s", threads, i, fed[i]-1, len(b.Tokens), len(batch), diff)
				}
			}
		}
		pool.Close()
	}
}

func firstDiff(got, want []float32) string {
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			return fmt.Sprintf("logit %d is %v batched, %v alone", i, got[i], want[i])
		}
	}
	return ""
}

var defaultOnce = sync.OnceValues(model.Default)

func TestBatchInvarianceStories260K(t *testing.T) {
	m, err := defaultOnce()
	if err != nil {
		t.Fatal(err)
	}
	checkBatchInvariance(t, m, 6, 40, model.KVF32)
	checkBatchInvariance(t, m, 6, 40, model.KVF16)
}

func TestBatchInvarianceRandom110MQ8(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a 110M-parameter model")
	}
	m := randomModel(t, convert.Shapes["110M"], tensor.Q8_0)
	checkBatchInvariance(t, m, 3, 12, model.KVF32)
}

func TestBatchInvarianceRandomGQAF16(t *testing.T) {
	// The 1.1B layout (32 query heads over 4 KV heads) at a small width.
	s := convert.Shape{Name: "gqa-small", Dim: 256, Hidden: 512, Layers: 2, Heads: 32, KVHeads: 4, Vocab: 600, ContextLen: 64}
	m := randomModel(t, s, tensor.F16)
	checkBatchInvariance(t, m, 4, 16, model.KVF32)
	checkBatchInvariance(t, m, 4, 16, model.KVF16)
}

func TestFingerprint(t *testing.T) {
	a, err := model.Default()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := model.Default()
	if a.Fingerprint() != b.Fingerprint() || len(a.Fingerprint()) != 64 {
		t.Fatalf("same model, fingerprints %s and %s", a.Fingerprint(), b.Fingerprint())
	}
	q := randomModel(t, convert.Shape{Name: "x", Dim: 64, Hidden: 64, Layers: 1, Heads: 2, KVHeads: 2, Vocab: 512, ContextLen: 32}, tensor.F32)
	if q.Fingerprint() == a.Fingerprint() {
		t.Fatal("different models share a fingerprint")
	}
	// One changed weight changes the fingerprint.
	c, _ := model.Default()
	norm := append([]float32(nil), c.Layers[0].AttnNorm...)
	norm[3] += 1e-3
	c.Layers[0].AttnNorm = norm
	if c.Fingerprint() == a.Fingerprint() {
		t.Fatal("a changed norm weight kept the fingerprint")
	}
}

// TestMACsPerToken: stories260K's products, counted from its published
// shape (dim 64, hidden 172, 5 layers, KV dimension 32, vocab 512).
func TestMACsPerToken(t *testing.T) {
	m, err := defaultOnce()
	if err != nil {
		t.Fatal(err)
	}
	layers, out := m.MACsPerToken()
	perLayer := int64(64*64 + 32*64 + 32*64 + 64*64 + 3*172*64) // Q, K, V, O, gate, up, down
	if layers != 5*perLayer || out != 512*64 {
		t.Fatalf("MACsPerToken = %d, %d; want %d, %d", layers, out, 5*perLayer, 512*64)
	}
}

// TestRunnerContext: a Runner built for a shorter context than the model's
// gives the same bits within it, and refuses, with an error, a sequence
// that would reach past it (its attention scratch holds no more).
func TestRunnerContext(t *testing.T) {
	m, err := defaultOnce()
	if err != nil {
		t.Fatal(err)
	}
	pool := kernels.NewPool(2)
	defer pool.Close()
	tokens := []int{1, 403, 407, 261, 378, 1079 % m.Config.Vocab, 271, 45}
	want := logitsAlone(t, m, pool, tokens, model.KVF32)
	r := m.NewRunner(pool, 4, len(tokens))
	if r.MaxContext() != len(tokens) {
		t.Fatalf("MaxContext %d, want %d", r.MaxContext(), len(tokens))
	}
	if got := m.NewRunner(pool, 4, 1<<30).MaxContext(); got != m.Config.ContextLen {
		t.Fatalf("a context above the model's gave MaxContext %d, want the model's %d", got, m.Config.ContextLen)
	}
	cache, err := model.NewDenseCacheOf(&m.Config, len(tokens)+1, model.KVF32)
	if err != nil {
		t.Fatal(err)
	}
	l := make([]float32, m.Config.Vocab)
	for i, tok := range tokens {
		if err := r.Forward([]*model.Seq{{Tokens: []int{tok}, Pos: i, Cache: cache, Logits: l}}); err != nil {
			t.Fatal(err)
		}
		for j := range l {
			if l[j] != want[i][j] {
				t.Fatalf("token %d: logit %d is %v, the full-context runner gave %v", i, j, l[j], want[i][j])
			}
		}
	}
	err = r.Forward([]*model.Seq{{Tokens: []int{5}, Pos: len(tokens), Cache: cache, Logits: l}})
	if err == nil || !strings.Contains(err.Error(), "context is 8") {
		t.Fatalf("a token past the runner's context: %v, want an error naming its context", err)
	}
}
