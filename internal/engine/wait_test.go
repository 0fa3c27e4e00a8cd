package engine

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/kv"
	"github.com/bulkhead-llm/bulkhead/internal/model"
)

// stepCounter is an Observer that counts the step loop's turns and
// signals spun once it has seen limit of them.
type stepCounter struct {
	n     atomic.Int64
	limit int64
	spun  chan struct{}
}

func (c *stepCounter) ObserveStep(int, int, int) {
	if c.n.Add(1) == c.limit {
		close(c.spun)
	}
}
func (c *stepCounter) Preempted(string)              {}
func (c *stepCounter) OwnershipViolation()           {}
func (c *stepCounter) PrefixLookup(string, int, int) {}

// A request that cannot start because pages are held outside the engine
// (a decode server's reservation, a prefill server's lease on KV in
// transfer) waits without spinning the step loop: the loop turns a bounded
// number of times while it waits, and the request starts once the pages
// come back.
func TestBlockedQueueDoesNotSpin(t *testing.T) {
	m := stories(t)
	obs := &stepCounter{limit: 1000, spun: make(chan struct{})}
	h := startEngine(t, m, 4, 16, Config{BatchTokens: 32, MaxRunning: 8, Observer: obs})
	held, s := submitBlocked(t, h, m)
	select {
	case <-obs.spun:
		t.Fatalf("the step loop turned %d times while its only request waited for pages", obs.limit)
	case <-time.After(100 * time.Millisecond):
	}
	held.Free()
	startsOnceFreed(t, s)
}

// A waiting queue starts as soon as the pages come back, not at the end of
// its wait's bound: with the bound made an hour, only the pool's Freed
// signal can start the request within the test's deadline.
func TestFreedPagesWakeTheQueue(t *testing.T) {
	oldMin, oldMax := minStallWait, maxStallWait
	minStallWait, maxStallWait = time.Hour, time.Hour
	defer func() { minStallWait, maxStallWait = oldMin, oldMax }()
	m := stories(t)
	h := startEngine(t, m, 4, 16, Config{BatchTokens: 32, MaxRunning: 8})
	held, s := submitBlocked(t, h, m)
	time.Sleep(50 * time.Millisecond) // let the loop find nothing to run and sleep
	held.Free()
	startsOnceFreed(t, s)
}

// submitBlocked takes every page of h's 4-page pool for another owner, as a
// decode server's reservation would, then submits a 5-token request that
// must wait for them.
func submitBlocked(t *testing.T, h *harness, m *model.Model) (*kv.Seq, *Stream) {
	t.Helper()
	held, err := h.pool.Alloc(kv.Owner{Tenant: "reserved", Request: 1 << 62}, 4*16)
	if err != nil {
		t.Fatal(err)
	}
	prompt := m.Tokenizer.Encode("Once upon a time", true)
	s, err := h.e.Submit(context.Background(), admit(t, h.e, Request{Tenant: "a", Prompt: prompt, MaxTokens: 5}))
	if err != nil {
		t.Fatal(err)
	}
	return held, s
}

// startsOnceFreed requires s, blocked by submitBlocked, to run to its 5
// tokens within 10 s of its pages coming back.
func startsOnceFreed(t *testing.T, s *Stream) {
	t.Helper()
	wait, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if toks, res, err := collect(wait, s); err != nil || res.Err != nil || len(toks) != 5 {
		t.Fatalf("after the pages came back: %d tokens, %v %+v", len(toks), err, res)
	}
}
