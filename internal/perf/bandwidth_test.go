package perf

import (
	"runtime"
	"testing"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/kernels"
	"github.com/bulkhead-llm/bulkhead/internal/tensor"
)

func TestReadBandwidthIsPlausible(t *testing.T) {
	bw := ReadBandwidth(64<<20, 1, 2)
	// Anything below 100 MB/s or above 1 TB/s means the measurement is
	// broken (the reads were skipped, or the clock was), not the machine.
	if bw < 1e8 || bw > 1e12 {
		t.Fatalf("read bandwidth %.3g B/s is implausible", bw)
	}
}

func TestMACRateIsPlausible(t *testing.T) {
	for _, typ := range []tensor.DType{tensor.Q8_0, tensor.F32} {
		r1 := MACRate(typ, 1, 2)
		if r1 == 0 {
			t.Skipf("no SIMD kernels in this build (%s)", kernels.Features())
		}
		// A core of any machine these kernels run on multiplies between
		// 1 and 1,000 G values a second; outside that the loop was skipped
		// or the count is wrong.
		if r1 < 1e9 || r1 > 1e12 {
			t.Fatalf("%s: %.3g multiply-adds/s on one thread is implausible", typ, r1)
		}
	}
}

func TestHandoffLatencyIsPlausible(t *testing.T) {
	d := HandoffLatency(3)
	if runtime.GOMAXPROCS(0) < 2 {
		if d != 0 {
			t.Fatalf("one thread: hand-off %v, want 0", d)
		}
		return
	}
	// A cache line crosses between any two cores in well under 10 µs;
	// 0 means the loop did not run, and more means the threads took turns
	// on one processor (the measurement is then meaningless).
	if d <= 0 || d > 100*time.Microsecond {
		t.Fatalf("hand-off round trip %v is implausible", d)
	}
}
