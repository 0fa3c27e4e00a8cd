// Package perf measures the machine: memory read bandwidth, the physical
// limit that single-stream decode speed is judged against.
//
// It owns no model code; it reads a buffer far larger than the caches, as a
// forward pass reads weights, so that "fraction of bandwidth reached" means
// the same thing on every machine.
package perf

import (
	"sync"
	"time"
)

// ReadBandwidth returns the best observed read bandwidth in bytes per
// second when threads goroutines each sum their share of a size-byte
// buffer, over reps passes.
func ReadBandwidth(size int, threads, reps int) float64 {
	if threads < 1 {
		threads = 1
	}
	words := size / 8
	buf := make([]uint64, words)
	for i := range buf {
		buf[i] = uint64(i) // touch every page so reads hit memory, not the zero page
	}
	chunk := words / threads
	var best float64
	var sink uint64
	var mu sync.Mutex
	for r := 0; r < reps; r++ {
		var wg sync.WaitGroup
		start := time.Now()
		for t := 0; t < threads; t++ {
			part := buf[t*chunk : (t+1)*chunk]
			wg.Add(1)
			go func() {
				defer wg.Done()
				s := sumWords(part)
				mu.Lock()
				sink += s
				mu.Unlock()
			}()
		}
		wg.Wait()
		if bw := float64(threads*chunk*8) / time.Since(start).Seconds(); bw > best {
			best = bw
		}
	}
	if sink == 42 { // keep the sums observable so the reads are not optimised away
		best += 0
	}
	return best
}

// sumWords reads every word with four independent accumulators so the loop
// is bounded by loads, not by the add chain.
func sumWords(b []uint64) uint64 {
	var s0, s1, s2, s3 uint64
	i := 0
	for ; i+8 <= len(b); i += 8 {
		s0 += b[i] ^ b[i+4]
		s1 += b[i+1] ^ b[i+5]
		s2 += b[i+2] ^ b[i+6]
		s3 += b[i+3] ^ b[i+7]
	}
	for ; i < len(b); i++ {
		s0 += b[i]
	}
	return s0 + s1 + s2 + s3
}
