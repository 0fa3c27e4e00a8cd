package engine

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/kv"
	"github.com/bulkhead-llm/bulkhead/internal/sample"
)

// A request delivered prefilled (its KV already in pages of the pool)
// must not wait behind an earlier request that waits for pages: those
// pages may be its own, which it returns only by running. Here the pool
// has 4 pages, the prefilled request holds 3, and an earlier 32-token
// prompt needs 2: held in arrival order, neither could ever start.
func TestPrefilledNotHeldBehindPoolWait(t *testing.T) {
	m := stories(t)
	c := &m.Config
	pre := startEngine(t, m, 32, 16, Config{BatchTokens: 64, MaxRunning: 4})
	dec := startEngine(t, m, 4, 16, Config{BatchTokens: 64, MaxRunning: 4})

	// The prefilled request's KV, computed by a prefill engine and copied
	// into 3 of the decode pool's 4 pages.
	promptB := m.Tokenizer.Encode("Once upon a time", true)
	const maxB = 40
	aB := admit(t, dec.e, Request{Tenant: "b", Prompt: promptB, MaxTokens: maxB})
	st, err := pre.e.Prefill(context.Background(), aB)
	if err != nil {
		t.Fatal(err)
	}
	_, res, err := collect(context.Background(), st)
	if err != nil || res.Err != nil || res.Handoff == nil {
		t.Fatalf("prefill: %+v, %v", res, err)
	}
	hb := res.Handoff
	seq, err := dec.pool.Alloc(kv.Owner{Tenant: "b", Request: 1 << 60}, len(promptB)+maxB)
	if err != nil {
		t.Fatal(err)
	}
	k := make([]float32, len(promptB)*c.KVDim())
	v := make([]float32, len(k))
	for l := range c.Layers {
		if err := hb.Lease.ReadTokens(l, 0, len(promptB), k, v); err != nil {
			t.Fatal(err)
		}
		if err := seq.WriteTokens(l, 0, len(promptB), k, v); err != nil {
			t.Fatal(err)
		}
	}
	hb.Lease.Release()
	if st := dec.pool.Stats(); st.Free != 1 {
		t.Fatalf("decode pool: %+v, want 1 page free", st)
	}

	// The earlier request needs 2 pages, and waits for them.
	promptA := m.Tokenizer.Encode("Lily and Tom went to the park. They saw a big dog that ran after a red ball and", true)
	if n := (len(promptA) + 15) / 16; n != 2 {
		t.Fatalf("prompt A needs %d pages; the test wants 2", n)
	}
	const maxA = 5
	sa, err := dec.e.Submit(context.Background(), admit(t, dec.e, Request{Tenant: "a", Prompt: promptA, MaxTokens: maxA}))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond) // let the loop find A cannot start
	sb, err := dec.e.SubmitPrefilled(context.Background(), aB, seq, hb.FirstToken)
	if err != nil {
		t.Fatal(err)
	}

	wait, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, x := range []struct {
		name   string
		s      *Stream
		prompt []int
		max    int
	}{{"prefilled", sb, promptB, maxB}, {"waiting", sa, promptA, maxA}} {
		got, res, err := collect(wait, x.s)
		if err != nil || res.Err != nil {
			t.Fatalf("%s request did not finish: %v %+v (engine %+v, pool %+v)", x.name, err, res, dec.e.Stats(), dec.pool.Stats())
		}
		if want := solo(t, m, x.prompt, x.max, sample.Params{}); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s request differs from solo:\n got %v\nwant %v", x.name, got, want)
		}
	}
	waitIdle(t, dec)
	if st := dec.pool.Stats(); st.Free != 4 {
		t.Fatalf("decode pool after the requests: %+v", st)
	}
}
