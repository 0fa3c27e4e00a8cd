package kernels

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/tensor"
)

// spinFor is how long a waiting thread polls before it parks on a
// channel. Waking a parked thread goes through the scheduler and the OS,
// which on a virtual machine can take longer than a whole chunk of work:
// the woken worker then joins the job late and the caller does most of
// it. Between a decode step's pool passes the caller runs only short
// serial steps (a norm, RoPE, storing K and V, quantising the next input;
// from 8 tokens the model shares most of these out too), so polling for a
// few hundred microseconds keeps every wake-up off that path; parking
// after it keeps an idle Pool from burning a core.
var spinFor = 200 * time.Microsecond

// spinCheck is how many polls go between two readings of the clock.
const spinCheck = 256

// spin polls done until it reports true or spinFor has passed, and
// reports whether done did. Between rounds of polls it lets the Go
// scheduler run any other goroutine waiting for a processor: a polling
// worker holds one of GOMAXPROCS, and without the yield a server's other
// goroutines (a KV connection's writer with an ACK to send, say) could
// wait out a whole run of decode steps for it.
func spin(done func() bool) bool {
	start := time.Now()
	for {
		for range spinCheck {
			if done() {
				return true
			}
		}
		if time.Since(start) >= spinFor {
			return false
		}
		runtime.Gosched()
	}
}

// minParallelWork is the number of multiply-adds below which MatMul runs on
// the calling goroutine alone: under it, waking the workers costs more than
// they save. The result is the same either way.
const minParallelWork = 1 << 16

// cacheLine pads shared counters apart so that polling one does not steal
// the line another core writes.
type cacheLine [64]byte

type worker struct {
	_        cacheLine
	sleeping atomic.Bool
	wake     chan struct{} // buffered 1; a send matches one sleeping=true→false
	th       int           // the thread's index (the caller's is 0): its Pool.stores
	_        cacheLine
}

// Pool runs MatMul on a fixed set of worker goroutines plus the caller.
// It also owns the scratch that quantised activations use. A Pool is used
// by one goroutine at a time, and For's fn must not call back into it;
// either mistake panics rather than mixing two jobs. Close must be called
// to end the workers.
//
// A panic in fn or in a kernel, on any thread, stops the chunks no thread
// has claimed yet (and the rest of its own claim), waits for those the
// others are running or have claimed and reaches the caller: its own
// panic goes on unchanged, a worker's is raised there wrapped with the
// worker's stack. Either way the Pool is ready for the next call.
type Pool struct {
	threads int
	workers []*worker
	wg      sync.WaitGroup

	// The current job. The caller writes it before sharing out its chunks and
	// does not touch it again until every chunk is finished; a thread reads
	// it only after claiming a chunk, which the job cannot outlive.
	job struct {
		ps    [maxProducts]Product
		first [maxProducts + 1]int // chunk index where product k starts
		rows  [maxProducts]int     // rows per chunk of product k, a multiple of 16
		x     []float32
		xq    []byte
		xi    []byte // xq interleaved for the eight-token kernel, or nil
		n     int
		chunk int // For: items per chunk

		// fn, when set, makes the job a For loop over [0, n) instead of
		// a matrix product.
		fn func(chunk, lo, hi int)
	}

	// closing is atomic, not part of job: a worker that wakes late for a
	// job the caller already finished alone reads it while Close may be
	// writing it.
	closing atomic.Bool

	_   cacheLine
	gen atomic.Uint32 // bumped to wake the workers for a job
	_   cacheLine
	// runs are the threads' runs of the current job's chunks (see
	// share), total their number.
	runs     []chunkRun
	total    atomic.Uint32
	_        cacheLine
	finished atomic.Uint32 // chunks of the current job completed
	_        cacheLine
	waiting  atomic.Bool   // the caller is parked on done
	done     chan struct{} // buffered 1
	_        cacheLine

	busy     atomic.Bool                 // a For or MatMul runs (begin to end)
	panicked atomic.Pointer[workerPanic] // a worker's first panic in the job

	xq []byte // quantised activations, grown as needed
	// quant is a For job quantising tokens' activations; fn is bound
	// once, so that a MatMul allocates nothing.
	quant struct {
		x    []float32
		xq   []byte
		cols int
		fn   func(chunk, lo, hi int)
	}
	xi []byte // the same, interleaved for the eight-token kernel
	// stores is each thread's scratch for the sixteen-token kernels'
	// stores (x16Stores), indexed by thread, the caller's first.
	stores []x16Stores
	closed bool
}

// NewPool starts a Pool of threads threads, the caller counting as one, so
// threads-1 worker goroutines are started. threads <= 0 means one per
// runtime.GOMAXPROCS, which follows the container's CPU limit where
// runtime.NumCPU would count the host's cores; more than GOMAXPROCS are
// cut to it, since threads that cannot all run at once would only poll
// while holding the processors the others wait for.
func NewPool(threads int) *Pool {
	if procs := runtime.GOMAXPROCS(0); threads <= 0 || threads > procs {
		threads = procs
	}
	p := &Pool{threads: threads, done: make(chan struct{}, 1), stores: make([]x16Stores, threads), runs: make([]chunkRun, threads)}
	p.quant.fn = p.quantTokens
	for k := 1; k < threads; k++ {
		w := &worker{wake: make(chan struct{}, 1), th: k}
		p.workers = append(p.workers, w)
		p.wg.Add(1)
		go p.work(w)
	}
	return p
}

// Threads is the number of threads MatMul splits its rows over.
func (p *Pool) Threads() int { return p.threads }

// Close stops the workers and waits for them. The Pool must not be used
// afterwards; a second Close does nothing. Close from inside For's fn
// panics: it would wait for the very job it runs in.
func (p *Pool) Close() {
	if p.closed {
		return
	}
	if p.busy.Load() {
		panic("kernels: Close while the Pool is running a job")
	}
	p.closed = true
	p.closing.Store(true)
	p.publish(0)
	p.wg.Wait()
}

// publish wakes the workers for the job in p.job, split into total chunks.
func (p *Pool) publish(total int) {
	// The order matters: a worker that wakes late for the last job can
	// claim from the runs as soon as share stores them, so the finished
	// count must already be reset and the total (stored first in share)
	// already the new job's (TestLateWorkersClaimTheCurrentJob).
	p.finished.Store(0)
	p.share(total)
	p.gen.Add(1)
	for _, w := range p.workers {
		if w.sleeping.CompareAndSwap(true, false) {
			w.wake <- struct{}{}
		}
	}
}

func (p *Pool) work(w *worker) {
	defer p.wg.Done()
	// A memory fault in a chunk panics, like any other failure of it, and
	// reaches the caller (runChunks), instead of killing the process: the
	// weights are a file's mapping, and a file cut short under it faults
	// where it no longer reaches. The caller decides: model.Model.Fault
	// tells that case from a bug, which it panics on.
	debug.SetPanicOnFault(true)
	var seen uint32
	for {
		seen = p.waitGen(w, seen)
		if p.closing.Load() {
			return
		}
		if p.runClaims(w.th) {
			p.wakeCaller()
		}
	}
}

// wakeCaller wakes the caller if it is parked in waitDone.
func (p *Pool) wakeCaller() {
	if p.waiting.CompareAndSwap(true, false) {
		p.done <- struct{}{}
	}
}

// runClaims claims and runs chunks of the current job until none are left
// (th is the thread's index, 0 for the caller's goroutine). It reports
// whether it finished the job's last chunk.
func (p *Pool) runClaims(th int) bool {
	last := false
	for {
		c, k, ok := p.claim(th)
		if !ok {
			return last
		}
		total := p.total.Load()
		if ok, l := p.runChunks(int(c), int(k), total, th); !ok {
			return l
		}
		last = p.finished.Add(k) == total
	}
}

// waitGen returns once gen differs from seen. After polling it marks the
// worker asleep and re-checks gen, so that a publish either sees the mark
// (and sends a wake-up) or happened before the re-check.
func (p *Pool) waitGen(w *worker, seen uint32) uint32 {
	if spin(func() bool { return p.gen.Load() != seen }) {
		return p.gen.Load()
	}
	w.sleeping.Store(true)
	if g := p.gen.Load(); g != seen {
		if w.sleeping.CompareAndSwap(true, false) {
			return g
		}
		<-w.wake // publish claimed the mark and has sent, or will
		return g
	}
	<-w.wake
	return p.gen.Load()
}

// waitDone returns when all total chunks are finished. A worker that
// finished the last chunk of an earlier job may still send a wake-up meant
// for that job, so a wake-up is only a prompt to check again.
func (p *Pool) waitDone(total int) {
	t := uint32(total)
	if spin(func() bool { return p.finished.Load() == t }) {
		return
	}
	for {
		p.waiting.Store(true)
		if p.finished.Load() == t {
			if !p.waiting.CompareAndSwap(true, false) {
				<-p.done // a worker claimed the flag and sends; take it
			}
			return
		}
		<-p.done
		if p.finished.Load() == t {
			return
		}
	}
}

// chunkRows picks the rows per chunk: a multiple of 16, so no two threads
// write the same 64-byte line of an aligned out (when Rows is a multiple
// of 16 too, as in every model; else only false sharing), and about
// chunksPerThread chunks per thread, so a thread that the OS deschedules
// holds up little work: the others take what it has not claimed, and it
// claims at most maxClaimChunks at once (claim). A chunk also holds at
// most maxChunkBytes of weights (rb bytes a row), so that when one thread
// runs slower the other waits at most about one claim's read at the end
// of a large matrix (a 32000-row classifier split four ways per thread
// was 3 MB a chunk, a quarter of a millisecond).
func chunkRows(rows, rb, threads int) int {
	c := (rows + threads*chunksPerThread - 1) / (threads * chunksPerThread)
	if rb > 0 {
		c = min(c, maxChunkBytes/rb)
	}
	return max(16, (c+15)&^15)
}

// maxChunkBytes bounds a chunk's weights; see chunkRows.
const maxChunkBytes = 256 << 10

const chunksPerThread = 4

// matRows dispatches to the SIMD or the pure-Go kernels; st is the
// calling thread's scratch for the batched kernels' stores, or nil.
func matRows(w *Matrix, r0, r1 int, x []float32, xq, xi []byte, n int, out []float32, ostride int, st *x16Stores) {
	if useSIMD {
		matRowsSIMD(w, r0, r1, x, xq, xi, n, out, ostride, st)
		return
	}
	matRowsGo(w, r0, r1, x, xq, n, out, ostride)
}

// MatMul computes out[i*w.Rows+r] = Σ_c w[r,c]·x[i*w.Cols+c] for every token
// i < n and row r < w.Rows. For quantised weights (Q8_0, Q4_0, Q4_1, Q5_0,
// Q5_1 and the K-quants) each token's row of x is first quantised to blocks
// of 32 int8 values with a float32 scale.
//
// The value for token i depends only on w and token i's row of x: not on n,
// the other rows, the thread count or the CPU features, bit for bit.
//
// It panics if the shapes do not fit (a programming error, not an input
// error): len(x) < n*w.Cols, len(out) < n*w.Rows, too little weight data,
// an unsupported type, or Cols not a multiple of 32 for quantised types
// (256 for the K-quants).
func (p *Pool) MatMul(out []float32, w *Matrix, x []float32, n int) {
	p.begin("MatMul")
	defer p.end()
	p.job.ps[0] = Product{W: w, Out: out}
	p.matMuls(x, n, 1)
}

// Product is one matrix of a MatMuls call and where its result goes.
type Product struct {
	W   *Matrix
	Out []float32 // token i's result at Out[i*W.Rows : (i+1)*W.Rows]
}

// maxProducts bounds a MatMuls call; a layer's largest group (query, key
// and value) is three.
const maxProducts = 4

// MatMuls computes each product's MatMul of the same activations x, with
// the bits MatMul gives, in one pass of the pool: x is quantised once, and
// the threads are woken and waited for once rather than once per matrix.
// Every W must have the same Cols. It panics for more than four products
// or on the shapes MatMul panics on.
func (p *Pool) MatMuls(x []float32, n int, ps []Product) {
	if len(ps) > maxProducts {
		panic(fmt.Sprintf("kernels: MatMuls of %d products, at most %d", len(ps), maxProducts))
	}
	p.begin("MatMuls")
	defer p.end()
	copy(p.job.ps[:], ps)
	p.matMuls(x, n, len(ps))
}

// matMuls runs the products already in p.job.ps[:np], between begin and
// end.
func (p *Pool) matMuls(x []float32, n, np int) {
	ps := p.job.ps[:np]
	quant, work := false, 0
	for _, pr := range ps {
		w, out := pr.W, pr.Out
		checkMatrix(w)
		if w.Cols != ps[0].W.Cols {
			panic(fmt.Sprintf("kernels: MatMuls of matrices %d and %d columns wide", ps[0].W.Cols, w.Cols))
		}
		// fits, not len(x) < n*w.Cols: a product that wraps would pass
		// and send the kernels past the end of x or out.
		if n < 0 || !fits(n, w.Cols, len(x)) || !fits(n, w.Rows, len(out)) {
			panic(fmt.Sprintf("kernels: MatMul of %dx%d %s weights with %d tokens needs %d·%d floats of x and %d·%d of out, got %d and %d",
				w.Rows, w.Cols, w.Type, n, n, w.Cols, n, w.Rows, len(x), len(out)))
		}
		quant = quant || w.Type == tensor.Q8_0 || w.Type == tensor.Q4_0 || w.Type == tensor.Q4_K || w.Type == tensor.Q5_K || w.Type == tensor.Q6_K || w.Type == tensor.Q3_K || w.Type == tensor.Q2_K || legacyType(w.Type)
		work += w.Rows * w.Cols * n
	}
	if n == 0 || np == 0 {
		return
	}
	cols := ps[0].W.Cols
	var xq []byte
	if quant {
		nb := cols / 32
		need := n * nb * xBlockBytes
		if cap(p.xq) < need {
			p.xq = make([]byte, need)
		}
		xq = p.xq[:need]
		switch {
		case nb == 0:
		case p.threads > 1 && n >= parallelQuantTokens:
			// Each token's row is quantised on its own, so splitting
			// the tokens over the threads changes no bit.
			p.quant.x, p.quant.xq, p.quant.cols = x, xq, cols
			p.forEach(n, p.quant.fn)
		default:
			for i := 0; i < n; i++ {
				quantizeX(xq[i*nb*xBlockBytes:], x[i*cols:i*cols+cols])
			}
		}
	}
	var xi []byte
	if quant {
		// p.xi keeps its buffer through the calls that need none (nil):
		// decode steps between two prefills must not make the next
		// prefill allocate it again.
		if xi = gemmInterleave(p.xi, ps, xq, n); xi != nil {
			p.xi = xi
		}
	}
	if cols == 0 {
		for _, pr := range ps {
			clear(pr.Out[:n*pr.W.Rows])
		}
		return
	}
	if p.threads == 1 || work < minParallelWork {
		for _, pr := range ps {
			matRows(pr.W, 0, pr.W.Rows, x, xq, xi, n, pr.Out, pr.W.Rows, &p.stores[0])
		}
		return
	}
	j := &p.job
	total := 0
	for k, pr := range ps {
		j.first[k] = total
		rb, _ := pr.W.Type.RowBytes(pr.W.Cols)
		j.rows[k] = chunkRows(pr.W.Rows, rb, p.threads)
		total += (pr.W.Rows + j.rows[k] - 1) / j.rows[k]
	}
	j.first[np] = total
	j.x, j.xq, j.xi, j.n = x, xq, xi, n
	p.run(total)
}

// parallelQuantTokens is the fewest tokens whose activations MatMul
// quantises on all threads rather than on the caller alone.
const parallelQuantTokens = 8

// quantTokens quantises tokens [lo, hi) of the current quant job.
func (p *Pool) quantTokens(_, lo, hi int) {
	q, cols := &p.quant, p.quant.cols
	nb := cols / 32
	for i := lo; i < hi; i++ {
		quantizeX(q.xq[i*nb*xBlockBytes:], q.x[i*cols:i*cols+cols])
	}
}

// ForChunks is the number of chunks For splits n items into: at most
// chunksPerThread per thread, and at most n.
func (p *Pool) ForChunks(n int) int { return max(1, min(n, p.threads*chunksPerThread)) }

// For calls fn for contiguous chunks covering [0, n) on the pool's threads
// and returns when all have run. fn gets the chunk's index, below
// ForChunks(n), so it can use per-chunk scratch; chunks may run in any
// order and concurrently, so fn must only write what its range owns. The
// forward pass runs attention this way, one (token, group of heads) pair
// per item. fn must not call the Pool; if it panics, For panics (see
// Pool).
func (p *Pool) For(n int, fn func(chunk, lo, hi int)) {
	if fn == nil { // in p.job it would make the job a matrix product
		panic("kernels: For with a nil fn")
	}
	p.begin("For")
	defer p.end()
	p.forEach(n, fn)
}

// forEach is For between begin and end, for MatMul's quantisation too.
func (p *Pool) forEach(n int, fn func(chunk, lo, hi int)) {
	if n <= 0 {
		return
	}
	// Rounding up by remainder, not n+chunks-1: For(math.MaxInt) must not
	// wrap to a negative chunk size.
	chunks := p.ForChunks(n)
	size := n / chunks
	if n%chunks != 0 {
		size++
	}
	total := n / size
	if n%size != 0 {
		total++
	}
	if p.threads == 1 || total == 1 {
		for c := 0; c < total; c++ {
			lo := c * size
			fn(c, lo, lo+min(size, n-lo))
		}
		return
	}
	p.job.fn, p.job.n, p.job.chunk = fn, n, size
	p.run(total)
	p.job.fn = nil
}
