package engine

import (
	"testing"

	"github.com/bulkhead-llm/bulkhead/internal/kv"
)

// schedRig drives the scheduler alone, step by step, over a pool of
// 4-token pages: no model, no goroutine. A step's computation is
// simulated by feeding each planned sequence its tokens and appending a
// sampled token (1) to those that reached the end of theirs.
type schedRig struct {
	t      *testing.T
	s      *scheduler
	nextID uint64
}

func newSchedRig(t *testing.T, pages int, quota map[string]int) *schedRig {
	pool, err := kv.NewPool(kv.PoolConfig{Pages: pages, PageSize: 4, Layers: 1, KVDim: 4, TenantPages: quota})
	if err != nil {
		t.Fatal(err)
	}
	return &schedRig{t: t, s: &scheduler{pool: pool, budget: 64, maxRunning: 8, vocab: 8}}
}

// queue adds a request of tenant with a prompt of n tokens.
func (rig *schedRig) queue(tenant string, n int) *request {
	rig.nextID++
	r := &request{id: rig.nextID, tenant: tenant, tokens: make([]int, n), promptLen: n, maxTokens: 64}
	rig.s.enqueue(r)
	return r
}

// step plans one step and applies it as the engine would after the
// forward pass.
func (rig *schedRig) step() stepPlan {
	p := rig.s.plan()
	for i, r := range p.batch {
		r.fed += len(p.seqs[i].Tokens)
		if r.fed == len(r.tokens) {
			r.tokens = append(r.tokens, 1)
		}
	}
	return p
}

func startedIn(p stepPlan, r *request) bool {
	for _, x := range p.started {
		if x == r {
			return true
		}
	}
	return false
}

// A sequence that preempts itself at its own tenant's page quota holds
// back only its tenant's queue. The pool has room, so another tenant's
// queued request starts in that same step; before, any preemption kept
// every queued request waiting for the step.
func TestQuotaPreemptionHoldsOnlyItsTenant(t *testing.T) {
	rig := newSchedRig(t, 8, map[string]int{"a": 3})
	a1 := rig.queue("a", 11) // 3 pages; its 13th token needs a 4th
	a2 := rig.queue("a", 3)
	if p := rig.step(); !startedIn(p, a1) || startedIn(p, a2) {
		t.Fatalf("first step started %d requests; want a1 alone (a2 is over a's quota)", len(p.started))
	}
	rig.step() // a1 decodes its 12th token, still in 3 pages
	b1 := rig.queue("b", 3)
	p := rig.step() // a1's 13th token needs a 4th page: over a's quota
	if len(p.preempted) != 1 || p.preempted[0] != a1 {
		t.Fatalf("preempted %d requests; want a1, at its tenant's quota", len(p.preempted))
	}
	if !startedIn(p, b1) {
		t.Fatal("b's request did not start in the step where a's request preempted itself at a's quota; the pool had room")
	}
	if startedIn(p, a2) || startedIn(p, a1) {
		t.Fatal("a request of a, the tenant at its quota, started in the step of its preemption")
	}
}

// A preemption for want of pool pages still holds every queued request
// back for the step: what one would take, the preempted sequence needs.
func TestPoolPreemptionHoldsTheQueue(t *testing.T) {
	rig := newSchedRig(t, 4, nil)
	a1 := rig.queue("a", 7) // 2 pages, growing into a third at its 9th token
	b1 := rig.queue("b", 7) // 2 pages: the pool is full
	if p := rig.step(); !startedIn(p, a1) || !startedIn(p, b1) {
		t.Fatalf("first step started %d requests; want both", len(p.started))
	}
	rig.step()
	c1 := rig.queue("c", 1)
	p := rig.step()
	if len(p.preempted) == 0 {
		t.Fatal("no preemption although the pool is full and both sequences grow")
	}
	if startedIn(p, c1) {
		t.Fatal("a queued request started in the step of a preemption for want of pool pages")
	}
}
