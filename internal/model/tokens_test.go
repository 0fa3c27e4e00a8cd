package model_test

import (
	"errors"
	"math"
	"testing"

	"github.com/bulkhead-llm/bulkhead/internal/kernels"
	"github.com/bulkhead-llm/bulkhead/internal/model"
)

// slotFails is a DenseCache whose Slot fails for one layer and position,
// as a paged cache's does for a page that is not the sequence's.
type slotFails struct {
	*model.DenseCache
	layer, pos int
	stores     int // Slot calls that succeeded at or after pos in layer
}

var errForeignPage = errors.New("foreign page")

func (c *slotFails) Slot(layer, pos int) ([]float32, []float32, error) {
	if layer == c.layer && pos == c.pos {
		return nil, nil, errForeignPage
	}
	if layer == c.layer && pos > c.pos {
		c.stores++
	}
	return c.DenseCache.Slot(layer, pos)
}

// TestSlotFailsInABatch: a cache that fails part-way through a chunk of a
// batch big enough for the per-token passes to run on the Pool's threads
// fails its own sequence only, with the cache's error, asks for no slot
// past the failure, and leaves every other sequence's logits the bits it
// gets alone.
func TestSlotFailsInABatch(t *testing.T) {
	m, err := defaultOnce()
	if err != nil {
		t.Fatal(err)
	}
	prompts := [][]int{
		{1, 403, 407, 261, 378, 271, 45, 300},
		{1, 90, 91, 92},
		{1, 250, 251, 252, 253, 254},
	}
	one := kernels.NewPool(1)
	defer one.Close()
	pool := kernels.NewPool(2)
	defer pool.Close()
	r := m.NewRunner(pool, 32, 0)
	var batch []*model.Seq
	var bad *slotFails
	for i, p := range prompts {
		d, err := model.NewDenseCacheOf(&m.Config, len(p), model.KVF16)
		if err != nil {
			t.Fatal(err)
		}
		var c model.SeqCache = d
		if i == 0 {
			bad = &slotFails{DenseCache: d, layer: 2, pos: 3}
			c = bad
		}
		batch = append(batch, &model.Seq{Tokens: p, Cache: c, Logits: make([]float32, m.Config.Vocab)})
	}
	if err := r.Forward(batch); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(batch[0].Err, errForeignPage) {
		t.Fatalf("the failing sequence's Err is %v, want the cache's error", batch[0].Err)
	}
	if bad.stores != 0 {
		t.Fatalf("the forward pass asked for %d slots past the failed one", bad.stores)
	}
	for i := 1; i < len(prompts); i++ {
		if batch[i].Err != nil {
			t.Fatalf("sequence %d failed too: %v", i, batch[i].Err)
		}
		want := logitsAlone(t, m, one, prompts[i], model.KVF16)
		got := batch[i].Logits
		for j := range got {
			if math.Float32bits(got[j]) != math.Float32bits(want[len(prompts[i])-1][j]) {
				t.Fatalf("sequence %d: logit %d is %v beside the failing one, %v alone", i, j, got[j], want[len(prompts[i])-1][j])
			}
		}
	}
}
