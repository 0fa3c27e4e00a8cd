package kernels

import (
	"errors"
	"fmt"
	"runtime/debug"
)

// This file holds how one call owns the Pool (begin, end) and how a chunk
// that panics, on any thread, ends the job cleanly (runChunks, run; cancel
// is in pool_claim.go): a Pool that is used by a server must survive a
// recovered panic with nothing of the failed call left in it.

// runChunks runs chunks [c, c+k) of the current job (of total chunks)
// and reports whether it returned. If one panics or calls runtime.Goexit,
// the chunks nobody claimed are cancelled and counted finished with these
// k, run or not (last: that finished the job), else the other threads
// would count theirs against the caller's next job. A worker recovers and keeps the panic for run to
// raise; the caller's goes on once the other threads are out of the job.
func (p *Pool) runChunks(c, k int, total uint32, th int) (ok, last bool) {
	caller := th == 0
	defer func() {
		if ok {
			return
		}
		if !caller {
			r := recover()
			if r == nil {
				// Only runtime.Goexit unwinds with nothing to recover:
				// this goroutine ends, so it wakes the caller itself.
				r = errGoexit
				defer func() {
					if last {
						p.wakeCaller()
					}
				}()
			}
			p.panicked.CompareAndSwap(nil, &workerPanic{value: r, stack: debug.Stack()})
		}
		last = p.finished.Add(uint32(k)+p.cancel()) == total
		if caller && !last {
			p.waitDone(int(total))
		}
	}()
	j := &p.job
	end := c + k
	if j.fn != nil {
		for ; c < end; c++ {
			r0 := c * j.chunk
			j.fn(c, r0, r0+min(j.chunk, j.n-r0))
		}
		return true, false
	}
	// One call per product for the chunks of it claimed together: the
	// kernels stream each call's rows, and the longer the streams the
	// better the prefetchers follow them. A row's value does not depend
	// on which call computes it.
	for pk := 0; c < end; pk++ {
		if c >= j.first[pk+1] {
			continue
		}
		e := min(end, j.first[pk+1])
		w := j.ps[pk].W
		r0, r1 := (c-j.first[pk])*j.rows[pk], min(w.Rows, (e-j.first[pk])*j.rows[pk])
		matRows(w, r0, r1, j.x, j.xq, j.xi, j.n, j.ps[pk].Out, w.Rows, &p.stores[th])
		c = e
	}
	return true, false
}

// run publishes the job in p.job as total chunks, works on it alongside
// the workers and returns when every chunk has finished, raising a
// worker's panic if one had any.
func (p *Pool) run(total int) {
	p.publish(total)
	if !p.runClaims(0) {
		p.waitDone(total)
	}
	if e := p.panicked.Swap(nil); e != nil {
		panic(e)
	}
}

// begin marks the Pool busy with a call of op, refusing a closed Pool and
// a call while another runs: For, MatMul or Close from inside fn would
// overwrite the running job's state (or wait for itself), and so would a
// second goroutine. A single-threaded Pool refuses it too, where it would
// happen to work, so that the mistake shows whatever the thread count.
func (p *Pool) begin(op string) {
	if !p.busy.CompareAndSwap(false, true) {
		panic("kernels: " + op + " while the Pool is running a job: a Pool takes one caller at a time, and For's fn must not call back into it")
	}
	if p.closed {
		p.busy.Store(false)
		panic("kernels: " + op + " on a closed Pool")
	}
}

// end lets go of everything the finished call held of its caller's (fn,
// the activations, the matrices and outputs), so that a request's data is
// neither kept alive nor reachable from the Pool afterwards, and marks the
// Pool free. It is deferred, so it runs after a panic too.
func (p *Pool) end() {
	j := &p.job
	j.fn, j.x, j.xq, j.xi = nil, nil, nil, nil
	clear(j.ps[:])
	p.quant.x, p.quant.xq = nil, nil
	p.panicked.Store(nil)
	p.busy.Store(false)
}

// errGoexit is the panic of a worker whose fn called runtime.Goexit.
var errGoexit = errors.New("fn called runtime.Goexit on a Pool worker")

// workerPanic is what For and MatMul panic with on the caller when a
// chunk panicked on a worker: the value, and the worker's stack, which
// the caller's own traceback cannot show.
type workerPanic struct {
	value any
	stack []byte
}

func (e *workerPanic) Error() string {
	return fmt.Sprintf("kernels: panic on a Pool worker: %v\n\nworker stack:\n%s", e.value, e.stack)
}

// Unwrap gives the worker's panic value when it is an error, so that
// errors.As still finds a runtime.Error.
func (e *workerPanic) Unwrap() error {
	err, _ := e.value.(error)
	return err
}
