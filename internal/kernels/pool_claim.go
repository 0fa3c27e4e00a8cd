package kernels

import "sync/atomic"

// This file holds how a job's chunks are handed out. Each thread owns a
// contiguous run of them and takes from its front, half of what is left
// at a time (at most maxClaimChunks), so that in a matrix product it reads
// its rows of weights in a few long streams; a thread whose run is used up
// takes the others' chunks one at a time from their back ends, so a thread
// that starts late or runs slow still holds up little.
//
// Handing out one chunk at a time from a shared counter, as the Pool did
// before, interleaved the threads' chunks and restarted every stream at
// each one. On the 110M Q8_0 shape's decode-step products (the sequence
// BenchmarkDecodeMatrices runs, 2 threads, medians of several hundred
// alternating passes) that read 35.5 GB/s where the host's two threads
// share one core and 44.3 where they do not; runs read 38.9 and 51.8
// (38.8 and 55.4 with the cap below, in a later run of the same
// test), against a read probe of about 36 and 61. (One chunk per thread
// read 39.6 and 55.6, but leaves a slow thread's whole share to it.) The
// prefetchers follow a stream, and each call of a kernel starts its four
// streams over.

// maxClaimChunks caps a thread's claim on its own run: chunks hold at
// most maxChunkBytes (256 KiB) of weights, so a thread descheduled right
// after claiming holds up at most about 1 MiB of reads, a few tens of
// microseconds, which the others cannot take from it. Against no cap it
// measured the same or better: 38.8 against 36.6 GB/s where the threads
// share a core, 55.4 against 54.3 where they do not. One matrix gives each
// thread about chunksPerThread chunks, so the cap binds on calls of three
// or more products and on matrices whose chunks maxChunkBytes cuts small
// (the classifier).
const maxClaimChunks = 4

// chunkRun is one thread's run of chunks, next<<32 | end: chunks
// [next, end) are unclaimed. One word, so that the owner taking the front
// and a thief taking the back cannot both take the last chunk.
type chunkRun struct {
	_ cacheLine
	v atomic.Uint64
	_ cacheLine
}

// share splits total chunks into the threads' runs and sets the job's
// total. A thread that wakes late, after its job ended, finds every run
// used up until this stores the next job's: it then claims against that
// job and reads that job's total (stored first), never a stale one.
func (p *Pool) share(total int) {
	p.total.Store(uint32(total))
	t := len(p.runs)
	for k := range p.runs {
		lo, hi := uint64(k*total/t), uint64((k+1)*total/t)
		p.runs[k].v.Store(lo<<32 | hi)
	}
}

// claim takes chunks for thread th and returns the first and how many:
// half of what is left at the front of its own run (rounded up, at most
// maxClaimChunks), or else one chunk from the back of another thread's
// run, trying the next threads' in turn. It reports false when none is
// left.
func (p *Pool) claim(th int) (c, k uint32, ok bool) {
	for i := range p.runs {
		r := &p.runs[(th+i)%len(p.runs)].v
		for {
			v := r.Load()
			next, end := uint32(v>>32), uint32(v)
			if next >= end {
				break
			}
			if i == 0 {
				k := min((end-next+1)/2, maxClaimChunks)
				if r.CompareAndSwap(v, v+uint64(k)<<32) {
					return next, k, true
				}
			} else if r.CompareAndSwap(v, v-1) {
				return end - 1, 1, true
			}
		}
	}
	return 0, 0, false
}

// cancel stops the handing out of the current job's chunks and returns how
// many no thread had claimed: they will never run.
func (p *Pool) cancel() uint32 {
	var n uint32
	for k := range p.runs {
		r := &p.runs[k].v
		for {
			v := r.Load()
			next, end := uint32(v>>32), uint32(v)
			if next >= end {
				break
			}
			if r.CompareAndSwap(v, uint64(end)<<32|uint64(end)) {
				n += end - next
				break
			}
		}
	}
	return n
}
