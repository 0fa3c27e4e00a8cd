package kernels

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/tensor"
)

// goid returns the calling goroutine's id, so that a test's fn can tell
// the caller's chunks from the workers'.
func goid() uint64 {
	var buf [64]byte
	s := bytes.TrimPrefix(buf[:runtime.Stack(buf[:], false)], []byte("goroutine "))
	id, _ := strconv.ParseUint(string(s[:bytes.IndexByte(s, ' ')]), 10, 64)
	return id
}

// twoThreads returns a Pool of two threads, raising GOMAXPROCS to two for
// the test if need be.
func twoThreads(t *testing.T) *Pool {
	t.Helper()
	if runtime.GOMAXPROCS(0) < 2 {
		old := runtime.GOMAXPROCS(2)
		t.Cleanup(func() { runtime.GOMAXPROCS(old) })
	}
	p := NewPool(2)
	t.Cleanup(p.Close)
	return p
}

// poolOf is a Pool of one thread or, through twoThreads, two, closed
// when the test ends: the tests that run on both repeat it per count.
func poolOf(t *testing.T, threads int) *Pool {
	t.Helper()
	if threads == 2 {
		return twoThreads(t)
	}
	p := NewPool(threads)
	t.Cleanup(p.Close)
	return p
}

// catch runs f and returns what it panicked with, or nil.
func catch(f func()) (r any) {
	defer func() { r = recover() }()
	f()
	return nil
}

// within runs f on its own goroutine and fails the test if f does not
// return within d: a wedged Pool shows as a hang, not as a wrong value.
func within(t *testing.T, d time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s: still running after %v", what, d)
	}
}

// forOnce runs For(n) on p, counting each item's runs, and returns the
// first item that did not run exactly once and how often it ran, or -1.
func forOnce(p *Pool, n int) (item int, runs int32) {
	hits := make([]int32, n)
	p.For(n, func(_, lo, hi int) {
		for i := lo; i < hi; i++ {
			atomic.AddInt32(&hits[i], 1)
		}
	})
	for i, h := range hits {
		if h != 1 {
			return i, h
		}
	}
	return -1, 0
}

// checkPoolWorks runs For and MatMul on p and fails unless both give what
// they must: a panic earlier must leave nothing behind.
func checkPoolWorks(t *testing.T, p *Pool) {
	t.Helper()
	for k := 0; k < 50; k++ {
		n := 1 + k*37%200
		if i, h := forOnce(p, n); i >= 0 {
			t.Fatalf("after a panic: For(%d) ran item %d %d times", n, i, h)
		}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	w, _ := randMatrix(t, rng, tensor.Q8_0, 512, 256)
	x := randFloats(rng, 9*256)
	got, want := make([]float32, 9*512), make([]float32, 9*512)
	p.MatMul(got, w, x, 9)
	matRows(w, 0, w.Rows, x, quantizeAll(w, x, 9), nil, 9, want, w.Rows, nil)
	if i := firstBitDiff(got, want); i >= 0 {
		t.Fatalf("after a panic: MatMul value %d = %v, want %v", i, got[i], want[i])
	}
}

// A panic in fn on the caller's goroutine must not leave the other
// threads running chunks of the abandoned job: they would count their
// chunk against the next job (which then returns early) and write while
// the caller has moved on. For waits for them before the panic goes on,
// and lets go of fn.
func TestForPanicWaitsForOtherThreads(t *testing.T) {
	p := twoThreads(t)
	if p.Threads() < 2 {
		t.Skip("needs two threads")
	}
	caller := goid()
	var started, running atomic.Int32
	r := catch(func() {
		p.For(8, failOnCaller(caller, &started, &running, func() { panic("boom") }))
	})
	if r != "boom" {
		t.Fatalf("For panicked with %v, want boom", r)
	}
	if started.Load() == 0 {
		t.Skip("the worker never woke; nothing to check")
	}
	if n := running.Load(); n != 0 {
		t.Fatalf("For's panic reached the caller while %d chunks still ran", n)
	}
	if p.job.fn != nil {
		t.Fatal("the Pool still holds the panicking fn")
	}
	within(t, 10*time.Second, "For and MatMul after a panic", func() { checkPoolWorks(t, p) })
}

// A panic in fn on a worker goroutine is raised on the caller (not as a
// crash of the whole process from a goroutine nobody can recover), naming
// the original value, and the Pool stays usable.
func TestForWorkerPanicReachesCaller(t *testing.T) {
	p := twoThreads(t)
	if p.Threads() < 2 {
		t.Skip("needs two threads")
	}
	caller := goid()
	var r any
	for try := 0; try < 20 && r == nil; try++ {
		r = catch(func() {
			p.For(64, func(_, _, _ int) {
				if goid() != caller {
					panic("worker boom")
				}
				time.Sleep(time.Millisecond)
			})
		})
	}
	if r == nil {
		t.Skip("no chunk ever ran on the worker")
	}
	err, ok := r.(error)
	if !ok || !strings.Contains(err.Error(), "worker boom") || !strings.HasPrefix(err.Error(), "kernels: ") {
		t.Fatalf("caller got %#v, want an error naming the worker's panic", r)
	}
	within(t, 10*time.Second, "For and MatMul after a worker panic", func() { checkPoolWorks(t, p) })
}

// For, MatMul or Close called from inside fn (or from another goroutine
// while a job runs) would overwrite the running job; the Pool says so
// instead of hanging or mixing two jobs' chunks, on one thread as on two.
func TestPoolRefusesReentrantUse(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	w, _ := randMatrix(t, rng, tensor.F32, 300, 256)
	x := randFloats(rng, 256)
	out := make([]float32, 300)
	for _, threads := range []int{1, 2} {
		p := poolOf(t, threads)
		for name, inner := range map[string]func(){
			"For":    func() { p.For(64, func(_, _, _ int) {}) },
			"MatMul": func() { p.MatMul(out, w, x, 1) },
			"MatMuls": func() {
				p.MatMuls(x, 1, []Product{{W: w, Out: out}})
			},
			"Close": p.Close,
		} {
			var r any
			within(t, 10*time.Second, name+" inside For", func() {
				r = catch(func() {
					p.For(2, func(c, _, _ int) {
						if c == 0 {
							inner()
						}
					})
				})
			})
			if s := fmt.Sprint(r); !strings.HasPrefix(s, "kernels: ") || !strings.Contains(s, "running") {
				t.Fatalf("threads %d: %s inside For panicked with %v, want the Pool to refuse it", threads, name, r)
			}
			within(t, 10*time.Second, "For and MatMul after refusing "+name, func() { checkPoolWorks(t, p) })
		}
	}
}

// For splits any n, however large, without overflowing its chunk bounds.
func TestForHugeN(t *testing.T) {
	for _, threads := range []int{1, 2} {
		p := poolOf(t, threads)
		var calls atomic.Int32
		var bad atomic.Value
		r := catch(func() {
			p.For(math.MaxInt, func(c, lo, hi int) {
				calls.Add(1)
				if lo < 0 || hi <= lo || hi-lo > math.MaxInt/p.ForChunks(math.MaxInt)+1 {
					bad.Store(fmt.Sprintf("chunk %d [%d, %d)", c, lo, hi))
				}
				panic("stop")
			})
		})
		if calls.Load() == 0 {
			t.Fatalf("threads %d: For(MaxInt) called fn for no chunk", threads)
		}
		if b := bad.Load(); b != nil {
			t.Fatalf("threads %d: For(MaxInt) gave %v", threads, b)
		}
		if s := fmt.Sprint(r); !strings.Contains(s, "stop") {
			t.Fatalf("threads %d: For panicked with %v, want stop", threads, r)
		}
	}
}

// A runtime error in a worker stays a runtime error for errors.As.
func TestWorkerPanicUnwraps(t *testing.T) {
	e := &workerPanic{value: fmt.Errorf("inner")}
	if e.Unwrap() == nil || e.Unwrap().Error() != "inner" {
		t.Fatalf("Unwrap = %v", e.Unwrap())
	}
	if (&workerPanic{value: "s"}).Unwrap() != nil {
		t.Fatal("a non-error value unwraps to non-nil")
	}
}

// runtime.Goexit in fn (t.FailNow, say) is handled like a panic: on the
// caller it waits for the other threads before the goroutine ends, and on
// a worker it reaches the caller as a panic; the Pool keeps working.
func TestForGoexit(t *testing.T) {
	p := twoThreads(t)
	if p.Threads() < 2 {
		t.Skip("needs two threads")
	}
	var running atomic.Int32
	var started atomic.Int32
	left := make(chan int32)
	go func() {
		defer func() { left <- running.Load() }()
		caller := goid()
		p.For(8, failOnCaller(caller, &started, &running, runtime.Goexit))
	}()
	if n := <-left; n != 0 {
		t.Fatalf("the caller's goroutine ended while %d chunks still ran", n)
	}
	caller := goid()
	var r any
	for try := 0; try < 20 && r == nil; try++ {
		r = catch(func() {
			p.For(64, func(_, _, _ int) {
				if goid() != caller {
					runtime.Goexit()
				}
				time.Sleep(time.Millisecond)
			})
		})
	}
	if r == nil {
		t.Skip("no chunk ever ran on the worker")
	}
	if s := fmt.Sprint(r); !strings.Contains(s, "Goexit") {
		t.Fatalf("worker's Goexit reached the caller as %v", r)
	}
	within(t, 10*time.Second, "For and MatMul after a Goexit", func() { checkPoolWorks(t, p) })
}

// For with a nil fn says so; on several threads it would otherwise run a
// stale matrix product in its place.
func TestForNilFn(t *testing.T) {
	for _, threads := range []int{1, 2} {
		p := poolOf(t, threads)
		rng := rand.New(rand.NewPCG(7, 7))
		w, _ := randMatrix(t, rng, tensor.F32, 300, 256)
		p.MatMul(make([]float32, 300), w, randFloats(rng, 256), 1)
		mustRefuse(t, fmt.Sprintf("threads %d: For(64, nil)", threads), func() { p.For(64, nil) })
		within(t, 10*time.Second, "For and MatMul after For(nil)", func() { checkPoolWorks(t, p) })
	}
}

// failOnCaller is a For fn whose chunks on other threads set started and
// run for 30 ms each (counted in running while they do), and whose chunk
// on the caller's goroutine waits until another thread has started one,
// then calls fail.
func failOnCaller(caller uint64, started, running *atomic.Int32, fail func()) func(_, _, _ int) {
	return func(_, _, _ int) {
		if goid() != caller {
			started.Store(1)
			running.Add(1)
			time.Sleep(30 * time.Millisecond)
			running.Add(-1)
			return
		}
		for end := time.Now().Add(5 * time.Second); started.Load() == 0 && time.Now().Before(end); {
			runtime.Gosched()
		}
		fail()
	}
}
