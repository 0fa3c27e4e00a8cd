package perf

import "testing"

func TestReadBandwidthIsPlausible(t *testing.T) {
	bw := ReadBandwidth(64<<20, 1, 2)
	// Anything below 100 MB/s or above 1 TB/s means the measurement is
	// broken (the reads were skipped, or the clock was), not the machine.
	if bw < 1e8 || bw > 1e12 {
		t.Fatalf("read bandwidth %.3g B/s is implausible", bw)
	}
}
