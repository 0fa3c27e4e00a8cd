package engine

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"testing"

	"github.com/bulkhead-llm/bulkhead/internal/kv"
	"github.com/bulkhead-llm/bulkhead/internal/sample"
)

// collectWith is collect with the tokens' log probabilities.
func collectWith(ctx context.Context, s *Stream) ([]int, []*sample.Logprobs, *Result, error) {
	var out []int
	var lps []*sample.Logprobs
	for {
		toks, lp, res, err := s.NextWith(ctx)
		if err != nil {
			return out, lps, nil, err
		}
		if lp == nil {
			lp = make([]*sample.Logprobs, len(toks))
		}
		out, lps = append(out, toks...), append(lps, lp...)
		if res != nil {
			return out, lps, res, nil
		}
	}
}

// A request that asks for log probabilities gets one entry per token: the
// token's, with the top alternatives, and the same entries whether it
// runs alone or batched with seven others (batch invariance covers the
// logits they are computed from). Greedy decoding draws the most likely
// token, so each entry's token heads its own top list.
func TestLogprobsPerToken(t *testing.T) {
	m := stories(t)
	h := startEngine(t, m, 64, 16, Config{BatchTokens: 64, MaxRunning: 8})
	prompt := m.Tokenizer.Encode("Once upon a time, there was a little girl named Lily.", true)
	p := sample.Params{Logprobs: true, TopLogprobs: 3}
	run := func() ([]int, []*sample.Logprobs) {
		s, err := h.e.Submit(context.Background(), admit(t, h.e, Request{Tenant: "a", Prompt: prompt, MaxTokens: 20, Sampling: p}))
		if err != nil {
			t.Fatal(err)
		}
		toks, lps, res, err := collectWith(context.Background(), s)
		if err != nil || res.Err != nil {
			t.Fatalf("%v %+v", err, res)
		}
		return toks, lps
	}
	alone, lpsAlone := run()
	if want := solo(t, m, prompt, 20, sample.Params{}); fmt.Sprint(alone) != fmt.Sprint(want) {
		t.Fatalf("asking for log probabilities changed the text: %v, want %v", alone, want)
	}
	for i, lp := range lpsAlone {
		if lp == nil || lp.Token != alone[i] || len(lp.Top) != 3 || lp.Top[0].Token != lp.Token || lp.Logprob != lp.Top[0].Logprob || lp.Logprob > 0 || lp.Top[1].Logprob > lp.Top[0].Logprob {
			t.Fatalf("token %d (%d): %+v", i, alone[i], lp)
		}
	}
	var wg sync.WaitGroup
	for range 7 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			other := m.Tokenizer.Encode("Tom had a big red ball", true)
			s, err := h.e.Submit(context.Background(), admit(t, h.e, Request{Tenant: "b", Prompt: other, MaxTokens: 30, Sampling: sample.Params{Temperature: 0.8, Seed: 1}}))
			if err == nil {
				collect(context.Background(), s)
			}
		}()
	}
	batched, lpsBatched := run()
	wg.Wait()
	if fmt.Sprint(batched) != fmt.Sprint(alone) || !reflect.DeepEqual(lpsBatched, lpsAlone) {
		t.Fatal("log probabilities differ between the request alone and batched")
	}
}

// Disaggregated, the prefill engine hands the first token's log
// probabilities over with the KV, and the decode engine, which cannot know
// them, marks the first entry unknown and gives the rest: together they
// are what one engine gives.
func TestLogprobsAcrossTheHandoff(t *testing.T) {
	m := stories(t)
	pre := startEngine(t, m, 32, 16, Config{BatchTokens: 64, MaxRunning: 4})
	dec := startEngine(t, m, 32, 16, Config{BatchTokens: 64, MaxRunning: 4})
	one := startEngine(t, m, 32, 16, Config{BatchTokens: 64, MaxRunning: 4})
	prompt := m.Tokenizer.Encode("Lily and Tom went to the park.", true)
	p := sample.Params{Temperature: 0.9, Seed: 5, Logprobs: true, TopLogprobs: 2}
	const maxTokens = 12
	a := admit(t, pre.e, Request{Tenant: "acme", Prompt: prompt, MaxTokens: maxTokens, Sampling: p})
	s, err := one.e.Submit(context.Background(), a)
	if err != nil {
		t.Fatal(err)
	}
	want, wantLps, _, err := collectWith(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	st, err := pre.e.Prefill(context.Background(), a)
	if err != nil {
		t.Fatal(err)
	}
	_, res, err := collect(context.Background(), st)
	if err != nil || res.Handoff == nil || res.Handoff.FirstLogprobs == nil {
		t.Fatalf("prefill: %+v %v", res, err)
	}
	h := res.Handoff
	seq, err := dec.pool.Alloc(kv.Owner{Tenant: "acme", Request: 9}, len(prompt)+maxTokens)
	if err != nil {
		t.Fatal(err)
	}
	copyKV(t, m.Config.Layers, m.Config.KVDim(), h.Lease, seq, len(prompt))
	ds, err := dec.e.SubmitPrefilled(context.Background(), a, seq, h.FirstToken)
	if err != nil {
		t.Fatal(err)
	}
	got, lps, _, err := collectWith(context.Background(), ds)
	if err != nil {
		t.Fatal(err)
	}
	if len(lps) == 0 || lps[0] != nil {
		t.Fatalf("decode's first entry: %+v; want unknown (nil)", lps)
	}
	lps[0] = h.FirstLogprobs
	if fmt.Sprint(got) != fmt.Sprint(want) || !reflect.DeepEqual(lps, wantLps) {
		t.Fatalf("disaggregated log probabilities differ from one engine's:\n got %v\nwant %v", got, want)
	}
}

// copyKV copies the first n positions of every layer from lease to seq,
// as a KV transfer does, and releases the lease.
func copyKV(t *testing.T, layers, kvDim int, lease *kv.Lease, seq *kv.Seq, n int) {
	t.Helper()
	k := make([]float32, n*kvDim)
	v := make([]float32, len(k))
	for l := 0; l < layers; l++ {
		if err := lease.ReadTokens(l, 0, n, k, v); err != nil {
			t.Fatal(err)
		}
		if err := seq.WriteTokens(l, 0, n, k, v); err != nil {
			t.Fatal(err)
		}
	}
	if err := lease.Release(); err != nil {
		t.Fatal(err)
	}
}
