package transfer

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/errkind"
	"github.com/bulkhead-llm/bulkhead/internal/kv"
)

var (
	flagSeed  = flag.Uint64("seed", 0, "run only this simulation seed, with a trace")
	flagSeeds = flag.Int("seeds", 1000, "number of simulation seeds TestSim runs")
)

// scenario is a failure mode of DESIGN.md section 6 that concerns the
// transfer; seed % numScenarios picks one, so every thousand seeds run each
// about fifty times, each with its own sizes, timings and fault draws.
type scenario int

const (
	scClean            scenario = iota // no faults: everything must succeed
	scLossy                            // drop, duplicate, reorder, jitter
	scCorrupt                          // bit flips on the wire
	scTruncate                         // torn frames, connection killed
	scKillFirst                        // connection dies at the first frame
	scKillMiddle                       // ... in the middle of the data
	scKillBeforeCommit                 // ... after all data, before commit
	scLimits                           // prompt at prefill limit-1, limit, limit+1
	scCountBug                         // sender told n-1 or n+1 tokens: short/long transfer
	scPoolFull                         // decode pool exhausted at reservation
	scWrongID                          // sender streams under an id decode never reserved
	scBadPayload                       // payload damaged before the CRC: only the digest sees it
	scDecodeAbort                      // decode aborts while frames arrive
	scAckLost                          // prefill never hears the ACK (most are dropped)
	scStale                            // prefill starts after the reservation's lease ran out
	scClientGone                       // client disconnects at a random phase
	scCrashP                           // prefill process dies mid-transfer
	scCrashD                           // decode process dies (and restarts) mid-transfer
	scReplay                           // duplicate reservation and replayed frames
	scAbortStorm                       // many transfers, lossy, all cancelled
	scSlowWrites                       // writes land late, with aborts: drain
	scOverlap                          // a forged DATA frame re-covers cells under a new seq
	scSlowLink                         // no faults, but each DATA frame takes 10-25 ms on the wire
	scIntruder                         // another connection injects frames: a rogue prefill before OPEN, anyone after
	scWrongTenant                      // a sender opens another tenant's reservation
	numScenarios
)

var scenarioNames = [...]string{"clean", "lossy", "corrupt", "truncate", "kill-first", "kill-middle", "kill-before-commit",
	"limits", "count-bug", "pool-full", "wrong-id", "bad-payload", "decode-abort", "ack-lost", "stale",
	"client-gone", "crash-prefill", "crash-decode", "replay", "abort-storm", "slow-writes", "overlap", "slow-link",
	"intruder", "wrong-tenant"}

func (s scenario) String() string { return scenarioNames[s] }

func randID(r *rand.Rand) ID {
	var id ID
	for i := range id {
		id[i] = byte(r.UintN(256))
	}
	return id
}

func newWorld(seed uint64) *world {
	rng := rand.New(rand.NewPCG(seed, 0xb01c4ead))
	sc := scenario(seed % uint64(numScenarios))
	w := &world{
		seed: seed, sc: sc, rng: rng, end: 30 * time.Second,
		layers: 2 + rng.IntN(2), kvdim: []int{32, 96}[rng.IntN(2)],
		maxFrame: []int{MinMaxFrameBytes, 2048, 4096}[rng.IntN(3)], window: []int{1, 2, 4, 8}[rng.IntN(4)],
		sendWindow: []int{1, 2, 3, 4, 8}[rng.IntN(5)],
		retry:      50 * time.Millisecond, lease: 2 * time.Second,
		table: NewTable(TableConfig{}), byID: map[ID]*simXfer{}, byPeer: map[uint64]*simXfer{}, nextPeer: routerPeer + 1,
	}
	switch sc {
	case scLossy, scAbortStorm:
		w.spec = FaultSpec{Drop: 0.05, Dup: 0.05, Reorder: 0.05}
		w.routerDrop = 0.2
	case scCorrupt:
		w.spec = FaultSpec{Corrupt: 0.05, Dup: 0.02}
	case scTruncate:
		w.spec = FaultSpec{Truncate: 0.05}
	case scSlowWrites, scAckLost:
		w.spec = FaultSpec{Dup: 0.05, Reorder: 0.05}
	}
	count := 1 + rng.IntN(3)
	if sc == scAbortStorm {
		count = 6
	}
	pPages, dPages := 0, 0
	for i := range count {
		x := &simXfer{idx: i, tenant: fmt.Sprintf("tenant%d", i%2), n: 1 + rng.IntN(12), maxNew: rng.IntN(5),
			fifo: sc != scLossy && sc != scAbortStorm}
		x.id, x.sendN = randID(rng), x.n
		x.sendID, x.sendTenant = x.id, x.tenant
		switch sc {
		case scLimits:
			x.pLimit = x.n + 1 - rng.IntN(3) // prompt at limit-1, limit or limit+1
		case scCountBug:
			if x.n > 1 && rng.IntN(2) == 0 {
				x.sendN = x.n - 1
			} else {
				x.sendN = x.n + 1
			}
		case scWrongID:
			if i == 0 {
				x.sendID = randID(rng)
			}
		case scWrongTenant:
			if i == 0 {
				x.sendTenant = "other-tenant"
			}
		}
		pPages += (max(x.n, x.sendN) + 3) / 4
		dPages += (x.n + x.maxNew + 3) / 4
		w.xs = append(w.xs, x)
	}
	if sc == scPoolFull {
		dPages = max(1, dPages-1-rng.IntN(dPages))
	}
	mk := func(pages int) *kv.Pool {
		p, err := kv.NewPool(kv.PoolConfig{Pages: pages, PageSize: 4, Layers: w.layers, KVDim: w.kvdim})
		if err != nil {
			panic(err)
		}
		return p
	}
	w.pPool, w.dPool = mk(pPages), mk(dPages)
	for _, x := range w.xs {
		w.setup(x)
	}
	w.at(0, w.tick)
	switch sc {
	case scCrashP:
		w.at(time.Duration(rng.IntN(80))*time.Millisecond, w.crashP)
	case scCrashD:
		w.at(time.Duration(rng.IntN(80))*time.Millisecond, w.crashD)
	case scReplay:
		w.at(10*time.Second, w.replay)
	}
	return w
}

// setup computes x's prefill KV (the ground truth) into the prefill pool,
// leases it as the engine would when prefill finishes, and schedules the
// router's steps.
func (w *world) setup(x *simXfer) {
	tokens := max(x.n, x.sendN)
	seq, err := w.pPool.Alloc(kv.Owner{Tenant: x.tenant, Request: uint64(x.idx + 1)}, tokens)
	if err != nil {
		panic(err)
	}
	for l := range w.layers {
		k, v := make([]float32, tokens*w.kvdim), make([]float32, tokens*w.kvdim)
		for i := range k {
			k[i], v[i] = w.rng.Float32()*2-1, w.rng.Float32()*2-1
		}
		x.truthK, x.truthV = append(x.truthK, k), append(x.truthV, v)
		if err := seq.WriteTokens(l, 0, tokens, k, v); err != nil {
			panic(err)
		}
	}
	if x.lease, err = seq.Lease(); err != nil {
		panic(err)
	}
	seq.Free() // pages now held by the lease alone: "release pending"
	spec := w.spec
	spec.Seed = w.rng.Uint64()
	switch w.sc {
	case scKillFirst:
		spec.KillAt = 2 // OPEN is frame 1
	case scKillMiddle, scKillBeforeCommit:
		probe := &Sender{cfg: SenderConfig{Tokens: x.sendN, Layers: w.layers, KVDim: w.kvdim}, maxFrame: w.maxFrame}
		probe.plan()
		spec.KillAt = 2 + probe.frames/2
		if w.sc == scKillBeforeCommit {
			spec.KillAt = 2 + probe.frames
		}
	}
	x.pd = newInjector(spec)
	spec.Seed, spec.KillAt = w.rng.Uint64(), 0
	if w.sc == scKillFirst && w.rng.IntN(2) == 0 {
		x.pd.spec.KillAt, spec.KillAt = 0, 1 // the HELLO dies instead
	}
	x.dp = newInjector(spec)
	s, err := NewSender(SenderConfig{ID: x.sendID, Tenant: x.sendTenant, Tokens: x.sendN, MaxTokens: x.pLimit,
		Layers: w.layers, KVDim: w.kvdim, FirstToken: int32(x.idx), Source: x.lease,
		MaxFrameBytes: w.maxFrame, Window: w.sendWindow, Lease: w.lease, Retry: w.retry})
	if err != nil {
		panic(err)
	}
	if w.sc == scBadPayload {
		x.badPayload = true
		s.corrupt = func(seq uint32, data []float32) {
			if seq == 0 {
				data[len(data)/2] += 1
			}
		}
	}
	x.sender = s
	w.byID[x.id] = x
	start := time.Duration(w.rng.IntN(20)) * time.Millisecond
	w.at(start, func() { w.reserve(x) })
	switch w.sc {
	case scClientGone, scAbortStorm:
		// From 10 ms before the reservation (the request still queued at
		// the router) to well into the transfer.
		gone := start + time.Duration(w.rng.IntN(130)-10)*time.Millisecond
		w.at(max(0, gone), func() { w.clientGone(x) })
	case scDecodeAbort, scSlowWrites:
		if w.sc == scDecodeAbort || w.rng.IntN(2) == 0 {
			w.at(start+time.Duration(w.rng.IntN(80))*time.Millisecond, func() {
				w.dActs(w.table.Step(Cancel{ID: x.id, Local: true}))
			})
		}
	}
}

// reserve is the router's reservation on decode, then its PREFILL to the
// prefill server.
func (w *world) reserve(x *simXfer) {
	if x.clientGone {
		if x.cancelAcked {
			// The router's cancel overtook this RESERVE and was
			// acknowledged: decode must refuse it, or its pages stay
			// reserved for nobody until the lease runs out.
			if err := w.table.Check(x.id); err == nil {
				w.violate("x%d: RESERVE accepted after decode acknowledged its CANCEL", x.idx)
			}
		}
		w.neverPrefilled(x)
		return
	}
	if err := w.table.Check(x.id); err != nil {
		w.violate("x%d fresh id refused: %v", x.idx, err)
		return
	}
	seq, err := w.dPool.Alloc(kv.Owner{Tenant: x.tenant, Request: uint64(100 + x.idx)}, x.n+x.maxNew)
	if err != nil {
		x.refused = err // 503 to the client; prefill never hears of it
		x.pReleased = true
		if err := x.lease.Release(); err != nil {
			w.violate("x%d: %v", x.idx, err)
		}
		return
	}
	x.dSeq, x.writes, x.issued = seq, make([]int, x.n*w.layers), make([]int, x.n*w.layers)
	res := Reservation{ID: x.id, Tenant: x.tenant, Tokens: x.n, MaxNew: x.maxNew, Layers: w.layers, KVDim: w.kvdim,
		Deadline: w.now + w.lease, Window: w.window, MaxFrameBytes: w.maxFrame, Sender: simPrefill, Router: simRouter}
	if err := w.table.Reserve(res); err != nil {
		w.violate("x%d reserve: %v", x.idx, err)
		return
	}
	x.reserved = true
	if w.sc == scIntruder {
		// A rogue prefill that learnt the id moves before the chosen
		// prefill's OPEN arrives (at 0 ms: before Start), or races it.
		w.at(time.Duration(w.rng.IntN(3))*time.Millisecond, func() { w.intrudeEarly(x) })
	}
	if w.sc == scReplay {
		if err := w.table.Reserve(res); err == nil {
			w.violate("x%d: a second RESERVE with the same id was accepted", x.idx)
		}
	}
	x.peer = w.nextPeer
	w.nextPeer++
	w.byPeer[x.peer] = x
	delay := w.lat()
	if w.sc == scStale {
		delay = w.lease + 100*time.Millisecond
	}
	w.at(delay, func() {
		if x.clientGone || x.pCrashed {
			w.neverPrefilled(x)
			return
		}
		x.pStarted, x.senderAlive = true, true
		w.pActs(x, x.sender.Step(Start{Now: w.now}))
		if x.sender.Err() != nil && x.sender.Err().Code == CodeTooLong {
			x.rejectedAtP = true
		}
	})
}

// neverPrefilled drops the KV of a request that prefill never ran.
func (w *world) neverPrefilled(x *simXfer) {
	if !x.pStarted && !x.pReleased {
		x.pReleased = true
		if err := x.lease.Release(); err != nil {
			w.violate("x%d: %v", x.idx, err)
		}
	}
}

func (w *world) tick() {
	w.dActs(w.table.Step(Tick{Now: w.now}))
	busy := w.table.Live() > 0
	for _, x := range w.xs {
		if x.senderAlive && !x.sender.Terminal() {
			w.pActs(x, x.sender.Step(Tick{Now: w.now}))
			busy = true
		}
		busy = busy || (x.cancelSent && !x.cancelAcked) || (x.dReady && !x.engineFreed)
	}
	if busy || w.q.Len() > 0 {
		w.at(10*time.Millisecond, w.tick)
	}
}

func (w *world) clientGone(x *simXfer) {
	x.clientGone = true
	if x.senderAlive {
		w.pActs(x, x.sender.Step(Cancel{ID: x.sendID}))
	}
	if x.reserved {
		w.sendCancel(x)
	} else if w.rng.IntN(2) == 0 {
		// The RESERVE is still on its way: the router's CANCEL overtakes
		// it and is acknowledged first (reserve checks the RESERVE is
		// then refused).
		for _, a := range w.table.Step(FrameIn{Peer: routerPeer, From: simRouter, Router: true, Frame: &Frame{Type: TypeCancel, ID: x.id, Code: CodeCancelled}}) {
			if sf, ok := a.(SendFrame); !ok || sf.Frame.Type != TypeCancelled {
				w.violate("x%d: cancel of a RESERVE not yet arrived caused %T", x.idx, a)
			}
		}
		x.cancelSent, x.cancelAcked = true, true
	}
}

func (w *world) crashP() {
	w.logf("prefill crashes")
	for _, x := range w.xs {
		if x.pReleased {
			continue
		}
		x.pCrashed, x.senderAlive, x.pReleased = true, false, true
		if err := x.lease.Release(); err != nil { // the process's memory is gone
			w.violate("x%d: %v", x.idx, err)
		}
		if x.peer != 0 {
			w.killConn(x)
		}
		if x.reserved && !x.dReady {
			w.sendCancel(x) // the router sees prefill die
		}
	}
}

func (w *world) crashD() {
	w.logf("decode crashes and restarts")
	w.dEpoch++
	w.table = NewTable(TableConfig{})
	for _, x := range w.xs {
		if !x.reserved {
			continue
		}
		x.dCrashed, x.pendingW, x.pendingD = true, 0, false
		if !x.dReleased && !x.engineFreed {
			x.engineFreed = true
			x.dSeq.Free() // the process's memory is gone
		}
		w.killConn(x)
		w.routerOnFailure(x)
	}
}

// replay re-sends every frame decode ever received, on the original and on
// a fresh connection: nothing may be written or become Ready again.
func (w *world) replay() {
	for _, x := range w.xs {
		for _, b := range x.recorded {
			for _, c := range []struct {
				peer uint64
				from Identity
			}{{x.peer, simPrefill}, {999, simPrefill}, {998, simRogue}} {
				f, err := Decode(b, w.maxFrame)
				if err != nil {
					continue
				}
				var want []Frame
				if c.from == simRogue {
					want = w.heardAsUnknown(c.peer, c.from, f)
				}
				acts := w.table.Step(FrameIn{Peer: c.peer, From: c.from, Frame: f})
				if got := heard(acts, c.peer); c.from == simRogue && !reflect.DeepEqual(got, want) {
					w.violate("x%d replayed %v frame from a rogue prefill heard %+v; for an unknown id %+v", x.idx, f.Type, got, want)
				}
				for _, a := range acts {
					switch a := a.(type) {
					case SendFrame:
					case SenderRefused:
						if c.from != simRogue {
							w.violate("x%d replayed %v frame from its own prefill was refused as another sender's", x.idx, f.Type)
						}
					default:
						w.violate("x%d replayed %v frame caused %T", x.idx, f.Type, a)
					}
				}
			}
		}
		if err := w.table.Check(x.id); err == nil && x.reserved {
			w.violate("x%d finished id may be reserved again", x.idx)
		}
	}
}

// planted is the one failure code a scenario plants on purpose. Any other
// integrity or protocol code means a bug: a wire fault that got past the
// frame CRC (the digest then catches it), or two honest machines that
// disagree on the protocol (a window, a credit, a frame count).
var planted = map[scenario]string{scBadPayload: CodeDigest, scCountBug: CodeCount, scOverlap: CodeCoverage, scWrongTenant: CodeTenant}

// mustSucceed says whether x must end Ready on decode and Done on
// prefill: no fault touched it, or only faults that retransmission
// repairs (loss, duplication, reordering, delay, lost ACKs, replays,
// an intruder on another connection).
func (w *world) mustSucceed(x *simXfer) bool {
	switch w.sc {
	case scClean, scLossy, scAckLost, scReplay, scSlowLink, scIntruder:
		return true
	case scLimits:
		return x.sendN <= x.pLimit
	case scWrongID, scWrongTenant:
		return x.idx != 0
	}
	return false
}

// expect adds each scenario's own promises to the generic invariants.
func (w *world) expect() error {
	for _, x := range w.xs {
		overLimit := x.pLimit > 0 && x.sendN > x.pLimit
		switch {
		case overLimit && (x.pFrames != 0 || x.dReady || x.pErr == nil || x.pErr.Code != CodeTooLong):
			return fmt.Errorf("x%d: prompt of %d tokens over the prefill limit %d must fail with %s before any frame; sent %d frames, decode ready=%v, prefill error %v",
				x.idx, x.sendN, x.pLimit, CodeTooLong, x.pFrames, x.dReady, x.pErr)
		case w.mustSucceed(x) && !(x.dReady && x.pDone):
			return fmt.Errorf("x%d: transfer did not succeed (nothing here may stop it): decode %v, prefill %v", x.idx, x.dErr, x.pErr)
		case planted[w.sc] != "" && (w.sc != scWrongTenant || x.idx == 0) && (x.dReady || x.dErr == nil || x.dErr.Code != planted[w.sc]):
			// Planted on this transfer: decode must catch it, and say so.
			return fmt.Errorf("x%d: must fail with %s on decode: ready=%v err=%v", x.idx, planted[w.sc], x.dReady, x.dErr)
		case (w.sc == scClean || w.sc == scSlowLink) && x.pResent > 0:
			// Nothing was lost, so a resend means the sender sat out a
			// retry interval: credit that never came, or came too late.
			return fmt.Errorf("x%d: fault-free transfer resent %d DATA frames (decode window %d, prefill window %d)",
				x.idx, x.pResent, w.window, w.sendWindow)
		case w.sc == scWrongID && x.idx == 0 && x.dReady:
			return fmt.Errorf("x0: Ready though prefill streamed under another id")
		case x.refused != nil && x.pFrames != 0:
			return fmt.Errorf("x%d: decode refused the reservation but prefill sent %d frames", x.idx, x.pFrames)
		}
		for _, e := range []*errkind.Error{x.dErr, x.pErr} {
			if e == nil || planted[w.sc] == e.Code {
				continue
			}
			switch e.Code {
			case CodeDigest, CodeCount, CodeCoverage, CodeTenant, CodeProtocol:
				return fmt.Errorf("x%d: failed with %s, which this scenario does not plant: %v", x.idx, e.Code, e)
			}
		}
	}
	return nil
}

func runSeed(seed uint64) (*world, error) {
	w := newWorld(seed)
	if err := w.run(); err != nil {
		return w, err
	}
	return w, w.expect()
}

func TestSim(t *testing.T) {
	if *flagSeed != 0 {
		w, err := runSeed(*flagSeed)
		t.Logf("seed %d scenario %v trace:\n%s", *flagSeed, w.sc, w.dump())
		if err != nil {
			t.Fatalf("seed %d (%v): %v", *flagSeed, w.sc, err)
		}
		return
	}
	seeds := *flagSeeds
	if testing.Short() {
		seeds = 100
	}
	ready, failed := make([]int, numScenarios), make([]int, numScenarios)
	for s := 1; s <= seeds; s++ {
		w, err := runSeed(uint64(s))
		if err != nil {
			t.Fatalf("seed %d (scenario %v): %v\nlast events:\n%s\nreplay: go test ./internal/transfer -run 'TestSim$' -seed=%d -v",
				s, w.sc, err, w.dump(), s)
		}
		for _, x := range w.xs {
			if x.dReady {
				ready[w.sc]++
			} else {
				failed[w.sc]++
			}
		}
	}
	// The run must exercise both outcomes, or the invariants checked nothing.
	if seeds >= int(numScenarios) {
		for sc := range numScenarios {
			t.Logf("%-20v ready %4d  error %4d", sc, ready[sc], failed[sc])
		}
		for _, sc := range []scenario{scClean, scLossy, scSlowLink, scIntruder} {
			if ready[sc] == 0 {
				t.Errorf("scenario %v never succeeded", sc)
			}
		}
		for _, sc := range []scenario{scCorrupt, scCountBug, scBadPayload, scPoolFull, scStale, scOverlap, scWrongTenant} {
			if failed[sc] == 0 {
				t.Errorf("scenario %v never failed a transfer", sc)
			}
		}
	}
}

// forge is the overlap scenario's hostile frame, sent right behind DATA
// seq 0 with a valid CRC (so that only the receiver's coverage rules can
// refuse it): seq 0's cells again under seq 1, or seq 0 again with other
// bytes.
func (w *world) forge(f *Frame) *Frame {
	b, err := f.Encode(nil, w.maxFrame)
	if err != nil {
		panic(err)
	}
	g, err := Decode(b, w.maxFrame)
	if err != nil {
		panic(err)
	}
	if w.rng.IntN(2) == 0 {
		g.Seq = 1
	} else {
		g.Payload[w.rng.IntN(len(g.Payload))] ^= 1
	}
	g.crc, g.crcFrom = 0, crcNone // Encode computes a CRC that matches
	return g
}
