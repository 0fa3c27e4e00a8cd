package perf

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/kernels"
	"github.com/bulkhead-llm/bulkhead/internal/tensor"
)

// MACRate returns the best observed rate, in multiply-adds per second,
// at which threads goroutines together run the innermost instruction
// sequence of the batched products for weights of type t
// (kernels.PeakMACs), over reps passes of about 50 ms each. It is the
// arithmetic ceiling that prefill and batched decode meet, as
// ReadBandwidth is the one that single-stream decode meets: no product of
// those weights on those threads multiplies faster, whatever its blocking.
// It returns 0 where the build has no SIMD kernels.
func MACRate(t tensor.DType, threads, reps int) float64 {
	threads = max(threads, 1)
	if kernels.PeakMACs(t, 1) == 0 {
		return 0
	}
	// Size a pass from a short timed run on one thread, so that a pass
	// takes long enough to swamp the cost of starting the goroutines on
	// any machine.
	rounds := 1 << 10
	for {
		start := time.Now()
		kernels.PeakMACs(t, rounds)
		if d := time.Since(start); d >= 5*time.Millisecond || rounds >= 1<<30 {
			rounds = int(float64(rounds) * float64(50*time.Millisecond) / float64(max(d, time.Microsecond)))
			break
		}
		rounds *= 4
	}
	rounds = max(rounds, 1)
	var best float64
	for r := 0; r < max(reps, 1); r++ {
		var total atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for range threads {
			wg.Add(1)
			go func() {
				defer wg.Done()
				total.Add(kernels.PeakMACs(t, rounds))
			}()
		}
		wg.Wait()
		if rate := float64(total.Load()) / time.Since(start).Seconds(); rate > best {
			best = rate
		}
	}
	return best
}
