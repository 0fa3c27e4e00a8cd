package perf

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// The bandwidth buffer gets transparent huge pages wherever the system
// allows them on request, so the bound is the best the memory can stream.
func TestReadBufferHugePages(t *testing.T) {
	mode, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	if err != nil || strings.Contains(string(mode), "[never]") {
		t.Skipf("transparent huge pages unavailable here (%q, %v)", mode, err)
	}
	before := anonHuge(t)
	buf, free := readBuffer(64 << 20 / 4)
	defer free()
	for i := range buf {
		buf[i] = 1
	}
	if got := anonHuge(t) - before; got < hugePageSize {
		t.Fatalf("a 64 MiB buffer has %d bytes in huge pages", got)
	}
}

func anonHuge(t *testing.T) int {
	b, err := os.ReadFile("/proc/self/smaps_rollup")
	if err != nil {
		t.Skip(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "AnonHugePages:" {
			kb, _ := strconv.Atoi(f[1])
			return kb << 10
		}
	}
	t.Skip("no AnonHugePages in smaps_rollup")
	return 0
}
