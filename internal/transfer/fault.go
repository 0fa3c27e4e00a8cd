package transfer

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"
)

// FaultSpec says which faults to inject on the frames a connection writes.
// Probabilities are per frame, in [0, 1].
type FaultSpec struct {
	Drop     float64       // the frame is not written
	Dup      float64       // the frame is written twice
	Reorder  float64       // the frame is held back and written after the next one
	Corrupt  float64       // one random bit of the frame is flipped
	Truncate float64       // a prefix of the frame is written, then the connection is closed
	Delay    time.Duration // each frame waits a uniform random time in [0, Delay) first
	KillAt   int           // close the connection instead of writing frame KillAt (1-based); 0: never
	Seed     uint64        // seeds the fault choices, so a run can be replayed
}

// ParseFaults parses a spec such as
// "drop=0.01,dup=0.01,reorder=0.02,corrupt=0.001,truncate=0.001,delay=5ms,kill=frame:12,seed=7".
// The empty string is no faults.
func ParseFaults(s string) (FaultSpec, error) {
	var f FaultSpec
	if strings.TrimSpace(s) == "" {
		return f, nil
	}
	seen := map[string]bool{}
	for _, item := range strings.Split(s, ",") {
		key, val, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok || val == "" {
			return FaultSpec{}, fmt.Errorf("fault spec %q: item %q is not key=value", s, item)
		}
		if seen[key] {
			return FaultSpec{}, fmt.Errorf("fault spec %q: %s given twice", s, key)
		}
		seen[key] = true
		var err error
		switch key {
		case "drop":
			f.Drop, err = parseProb(val)
		case "dup":
			f.Dup, err = parseProb(val)
		case "reorder":
			f.Reorder, err = parseProb(val)
		case "corrupt":
			f.Corrupt, err = parseProb(val)
		case "truncate":
			f.Truncate, err = parseProb(val)
		case "delay":
			f.Delay, err = time.ParseDuration(val)
			if err == nil && f.Delay < 0 {
				err = fmt.Errorf("negative")
			}
		case "kill":
			n, found := strings.CutPrefix(val, "frame:")
			if !found {
				err = fmt.Errorf("want frame:N")
				break
			}
			f.KillAt, err = strconv.Atoi(n)
			if err == nil && f.KillAt < 1 {
				err = fmt.Errorf("frame number must be at least 1")
			}
		case "seed":
			f.Seed, err = strconv.ParseUint(val, 10, 64)
		default:
			return FaultSpec{}, fmt.Errorf("fault spec %q: unknown fault %q (want drop, dup, reorder, corrupt, truncate, delay, kill or seed)", s, key)
		}
		if err != nil {
			return FaultSpec{}, fmt.Errorf("fault spec %q: %s=%s: %v", s, key, val, err)
		}
	}
	return f, nil
}

func parseProb(s string) (float64, error) {
	p, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("not a number")
	}
	if !(p >= 0 && p <= 1) { // NaN fails both comparisons
		return 0, fmt.Errorf("probability %v outside [0, 1]", p)
	}
	return p, nil
}

// String writes the spec back in ParseFaults's syntax.
func (f FaultSpec) String() string {
	var parts []string
	add := func(k string, p float64) {
		if p > 0 {
			parts = append(parts, k+"="+strconv.FormatFloat(p, 'g', -1, 64))
		}
	}
	add("drop", f.Drop)
	add("dup", f.Dup)
	add("reorder", f.Reorder)
	add("corrupt", f.Corrupt)
	add("truncate", f.Truncate)
	if f.Delay > 0 {
		parts = append(parts, "delay="+f.Delay.String())
	}
	if f.KillAt > 0 {
		parts = append(parts, "kill=frame:"+strconv.Itoa(f.KillAt))
	}
	parts = append(parts, "seed="+strconv.FormatUint(f.Seed, 10))
	return strings.Join(parts, ",")
}

// injector makes the fault decisions for one direction of one connection.
// The TCP/in-memory wrapper and the simulation both use it, so the faults
// tested in simulation are the faults a flag injects on real processes.
type injector struct {
	spec  FaultSpec
	rng   *rand.Rand
	held  []byte // a frame held back for reordering
	count int
	dead  bool
}

func newInjector(spec FaultSpec) *injector {
	return &injector{spec: spec, rng: rand.New(rand.NewPCG(spec.Seed, spec.Seed^0x9e3779b97f4a7c15))}
}

// apply decides the fate of frame b: the byte strings to write now, in
// order, and whether to close the connection after writing them.
func (in *injector) apply(b []byte) (emit [][]byte, kill bool) {
	if in.dead {
		return nil, true
	}
	in.count++
	if in.spec.KillAt > 0 && in.count >= in.spec.KillAt {
		in.dead = true
		return nil, true
	}
	r := in.rng
	if r.Float64() < in.spec.Drop {
		return nil, false
	}
	if r.Float64() < in.spec.Truncate && len(b) > 1 {
		in.dead = true
		return [][]byte{b[:1+r.IntN(len(b)-1)]}, true
	}
	if r.Float64() < in.spec.Corrupt {
		b = append([]byte(nil), b...)
		i := r.IntN(len(b))
		b[i] ^= 1 << r.IntN(8)
	}
	out := [][]byte{b}
	if r.Float64() < in.spec.Dup {
		out = append(out, b)
	}
	if in.held != nil {
		out = append(out, in.held)
		in.held = nil
	} else if r.Float64() < in.spec.Reorder {
		in.held, out = b, out[1:]
	}
	return out, false
}

// delay draws the wait before the next frame.
func (in *injector) delay() time.Duration {
	if in.spec.Delay <= 0 {
		return 0
	}
	return time.Duration(in.rng.Int64N(int64(in.spec.Delay)))
}

// faultConn injects faults into the frames written to a Conn.
type faultConn struct {
	Conn
	mu sync.Mutex
	in *injector
}

// WithFaults wraps c so that every frame written through it meets the
// faults of spec; reads pass through untouched (inject on both ends to
// fault both directions). A reordered frame is held until the next write;
// a frame held when the connection closes is lost, as it would be.
func WithFaults(c Conn, spec FaultSpec) Conn {
	return &faultConn{Conn: c, in: newInjector(spec)}
}

func (f *faultConn) Write(frame []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if d := f.in.delay(); d > 0 {
		time.Sleep(d)
	}
	emit, kill := f.in.apply(append([]byte(nil), frame...))
	for _, b := range emit {
		if err := f.Conn.Write(b); err != nil {
			return err
		}
	}
	if kill {
		f.Conn.Close()
		return fmt.Errorf("fault injection killed the connection at frame %d: %w", f.in.count, ErrClosed)
	}
	return nil
}
