package kernels

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// claimPool is a Pool's claim state alone, for threads threads: claim,
// share and cancel touch nothing else, so no workers are started.
func claimPool(threads int) *Pool { return &Pool{threads: threads, runs: make([]chunkRun, threads)} }

// Any interleaving of claims hands out every chunk exactly once. A thread
// takes its own run front to back, each time half of what is left
// (rounded up, at most maxClaimChunks), and only then one chunk at a time from the back of the
// others'; cancel returns exactly the chunks nobody took, after which
// nothing more is handed out.
func TestClaimsHandOutEveryChunkOnce(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		threads := rapid.IntRange(1, 8).Draw(t, "threads")
		total := rapid.IntRange(0, 300).Draw(t, "total")
		p := claimPool(threads)
		p.share(total)
		if got := p.total.Load(); got != uint32(total) {
			t.Fatalf("total %d after share(%d)", got, total)
		}
		taken := make([]int, total)
		// The runs as claim must leave them: [lo, hi) unclaimed.
		lo, hi := make([]int, threads), make([]int, threads)
		for th := range threads {
			lo[th], hi[th] = th*total/threads, (th+1)*total/threads
		}
		claimed := 0
		cancelAt := rapid.IntRange(-1, total).Draw(t, "cancelAt")
		for {
			if claimed == cancelAt {
				if n := int(p.cancel()); n != total-claimed {
					t.Fatalf("cancel after %d of %d chunks returned %d", claimed, total, n)
				}
				for th := range threads {
					if c, k, ok := p.claim(th); ok {
						t.Fatalf("thread %d claimed %d+%d after cancel", th, c, k)
					}
				}
				return
			}
			th := rapid.IntRange(0, threads-1).Draw(t, "thread")
			wantC, wantK := -1, 0
			if n := hi[th] - lo[th]; n > 0 {
				wantC, wantK = lo[th], min((n+1)/2, maxClaimChunks)
				lo[th] += wantK
			} else {
				for i := 1; i < threads; i++ {
					if v := (th + i) % threads; hi[v] > lo[v] {
						hi[v]--
						wantC, wantK = hi[v], 1
						break
					}
				}
			}
			c, k, ok := p.claim(th)
			if !ok {
				if wantK != 0 || claimed != total {
					t.Fatalf("thread %d found nothing with %d of %d chunks claimed", th, claimed, total)
				}
				return
			}
			if int(c) != wantC || int(k) != wantK {
				t.Fatalf("thread %d claimed %d+%d, want %d+%d", th, c, k, wantC, wantK)
			}
			for i := c; i < c+k; i++ {
				if taken[i]++; taken[i] > 1 {
					t.Fatalf("chunk %d of %d claimed twice", i, total)
				}
			}
			claimed += int(k)
		}
	})
}

// Threads claiming at once, through many jobs, still take every chunk
// exactly once, and one that cancels in the middle of a job gets exactly
// the chunks nobody took: the owner's front, a thief's back end and cancel
// all go through one word. The threads start together behind a gate, or
// the first would take most of each small job alone.
func TestClaimsRace(t *testing.T) {
	const threads, jobs = 4, 3000
	p := claimPool(threads)
	for job := range jobs {
		total := 1 + job%97
		taken := make([]atomic.Int32, total)
		p.share(total)
		var wg sync.WaitGroup
		var cancelled atomic.Uint32
		gate := make(chan struct{})
		for th := range threads {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-gate
				for n := 0; ; n++ {
					if th == threads-1 && job%3 == 0 && n == 2 {
						cancelled.Add(p.cancel())
					}
					c, k, ok := p.claim(th)
					if !ok {
						return
					}
					for i := c; i < c+k; i++ {
						taken[i].Add(1)
					}
				}
			}()
		}
		close(gate)
		wg.Wait()
		sum := int(cancelled.Load())
		for i := range taken {
			n := taken[i].Load()
			if n > 1 {
				t.Fatalf("job %d: chunk %d of %d claimed %d times", job, i, total, n)
			}
			sum += int(n)
		}
		if sum != total {
			t.Fatalf("job %d: %d of %d chunks claimed or cancelled", job, sum, total)
		}
	}
}

// Jobs back to back with workers that park at once wake them late, often
// after the caller finished the job alone and published the next: a late
// worker must claim against the job that is current and count against its
// total. Publishing in another order (the total after the runs, or the
// finished count reset after them) hangs here or runs an item twice.
func TestLateWorkersClaimTheCurrentJob(t *testing.T) {
	old := spinFor
	spinFor = 0
	t.Cleanup(func() { spinFor = old })
	p := twoThreads(t)
	deadline := time.Now().Add(3 * time.Second)
	within(t, 30*time.Second, "For jobs back to back", func() {
		for k := 0; time.Now().Before(deadline); k++ {
			n := 1 + k%9
			if i, h := forOnce(p, n); i >= 0 {
				t.Errorf("job %d: item %d of %d ran %d times", k, i, n, h)
				return
			}
		}
	})
}

// A panic on any chunk, so anywhere in a thread's claimed range, ends For
// once every chunk that started has returned, and leaves the Pool working:
// the chunks claimed with it that never run count as finished.
func TestPanicAnywhereInAClaim(t *testing.T) {
	p := twoThreads(t)
	for rep := range 50 {
		for bad := range 8 {
			var running atomic.Int32
			within(t, 10*time.Second, fmt.Sprint("a panic on chunk ", bad), func() {
				r := catch(func() {
					p.For(8, func(c, _, _ int) {
						running.Add(1)
						defer running.Add(-1)
						if c == bad {
							panic("boom")
						}
						time.Sleep(20 * time.Microsecond)
					})
				})
				if r == nil {
					t.Errorf("rep %d: For did not panic for chunk %d", rep, bad)
				}
			})
			if n := running.Load(); n != 0 {
				t.Fatalf("rep %d: For returned with %d chunks still running after a panic on chunk %d", rep, n, bad)
			}
		}
	}
	within(t, 10*time.Second, "the Pool after the panics", func() { checkPoolWorks(t, p) })
}
