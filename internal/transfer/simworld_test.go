package transfer

import (
	"container/heap"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/errkind"
	"github.com/bulkhead-llm/bulkhead/internal/kv"
)

// The simulated world: one prefill process (real Senders over a real
// kv.Pool), one decode process (a real Table over a real kv.Pool), a
// router model, and a seeded network whose faults come from the same
// injector WithFaults uses. Time is simulated; every event is a closure on
// a heap ordered by (time, insertion), so a seed replays exactly.

const routerPeer = 1

// The identities the simulated connections present: the one prefill
// process's, which every reservation names as its sender, a rogue
// prefill's (another holder of a prefill certificate) that learnt the
// transfer ids (scIntruder), the router's, which makes every reservation,
// and a rogue router's (another router certificate) that learnt them too.
var (
	simPrefill     = Identity{0x50, 0x52, 0x45}
	simRogue       = Identity{0x52, 0x4f, 0x47}
	simRouter      = Identity{0x52, 0x54, 0x52}
	simRogueRouter = Identity{0x52, 0x52, 0x52}
)

type simEv struct {
	at  time.Duration
	seq int
	fn  func()
}

type simQueue []simEv

func (q simQueue) Len() int { return len(q) }
func (q simQueue) Less(i, j int) bool {
	return q[i].at < q[j].at || (q[i].at == q[j].at && q[i].seq < q[j].seq)
}
func (q simQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *simQueue) Push(x any)   { *q = append(*q, x.(simEv)) }
func (q *simQueue) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}

// simXfer is one request as the world sees it, with the ground truth.
type simXfer struct {
	idx          int
	id           ID // reserved on decode by the router
	tenant       string
	n, maxNew    int
	sendN        int // tokens the sender is told (== n unless a scenario lies)
	sendID       ID  // id the sender uses (== id unless a scenario lies)
	sendTenant   string
	pLimit       int
	truthK       [][]float32 // [layer][token*kvdim]
	truthV       [][]float32
	lease        *kv.Lease
	sender       *Sender
	senderAlive  bool
	peer         uint64
	pd, dp       *injector
	lastPD       time.Duration // FIFO delivery per direction
	lastDP       time.Duration
	fifo         bool
	connDead     bool
	dSeq         *kv.Seq
	dEpoch       int
	writes       []int // per (token, layer) cell: writes that landed
	issued       []int // per cell: WriteKVs decode asked for
	intruded     bool
	pendingW     int
	pendingD     bool
	reserved     bool
	refused      error
	dReady       bool
	dFailed      bool
	dReleased    bool
	dCrashed     bool
	dErr         *errkind.Error
	readyTokens  int
	pStarted     bool
	pDone        bool
	pFailed      bool
	pReleased    bool
	pCrashed     bool
	pErr         *errkind.Error
	pFailAbort   bool // P's failure came from decode's ABORT
	pFrames      int
	pSent        map[uint32]bool // DATA seqs sent
	pResent      int             // DATA frames sent again
	clientGone   bool
	cancelSent   bool
	cancelAcked  bool
	recorded     [][]byte // P->D frames as delivered, for replay
	rejectedAtP  bool
	engineFreed  bool
	badPayload   bool
	lastInbound  bool // the frame being stepped into the sender is an ABORT
	replayedOnce bool
}

type world struct {
	seed          uint64
	sc            scenario
	rng           *rand.Rand
	now, end      time.Duration
	q             simQueue
	nseq          int
	layers, kvdim int
	maxFrame      int
	window        int // decode's (the reservation's)
	sendWindow    int // prefill's; the transfer uses the smaller
	retry, lease  time.Duration
	spec          FaultSpec
	pPool, dPool  *kv.Pool
	table         *Table
	dEpoch        int
	xs            []*simXfer
	byID          map[ID]*simXfer
	byPeer        map[uint64]*simXfer
	nextPeer      uint64
	err           error
	trace         []string
	routerDrop    float64
}

func (w *world) at(d time.Duration, fn func()) {
	w.nseq++
	heap.Push(&w.q, simEv{at: w.now + d, seq: w.nseq, fn: fn})
}

func (w *world) lat() time.Duration { return time.Duration(1+w.rng.IntN(5)) * time.Millisecond }

func (w *world) logf(format string, args ...any) {
	w.trace = append(w.trace, fmt.Sprintf("%8v ", w.now)+fmt.Sprintf(format, args...))
	if len(w.trace) > 400 {
		w.trace = w.trace[len(w.trace)-300:]
	}
}

// violate records the first invariant violation; the run stops there.
func (w *world) violate(format string, args ...any) {
	if w.err == nil {
		w.err = fmt.Errorf("t=%v: "+format, append([]any{w.now}, args...)...)
	}
}

func (w *world) run() error {
	for w.q.Len() > 0 && w.err == nil {
		ev := heap.Pop(&w.q).(simEv)
		if ev.at > w.end {
			break
		}
		w.now = ev.at
		ev.fn()
		w.checkStep()
	}
	if w.err == nil {
		w.checkEnd()
	}
	return w.err
}

// transmit sends f over one direction of x's connection, through the
// fault injector.
func (w *world) transmit(x *simXfer, toD bool, f *Frame) {
	b, err := f.Encode(nil, w.maxFrame)
	if err != nil {
		w.violate("state machine produced an unencodable %v: %v", f.Type, err)
		return
	}
	if x.connDead {
		return
	}
	if w.sc == scAckLost && f.Type == TypeAck && w.rng.IntN(5) != 0 {
		return // most ACKs are lost: prefill must retransmit COMMIT or time out
	}
	inj := x.dp
	if toD {
		inj = x.pd
	}
	emit, kill := inj.apply(b)
	for _, e := range emit {
		d := w.now + w.lat()
		if w.sc == scSlowLink && toD && f.Type == TypeData {
			// A link that carries one DATA frame per 10-25 ms: frames
			// queue behind each other, so half a window takes several
			// of the sender's 50 ms retry intervals.
			d = max(d, x.lastPD) + time.Duration(10+w.rng.IntN(16))*time.Millisecond
		}
		if x.fifo || w.sc == scSlowLink {
			last := &x.lastDP
			if toD {
				last = &x.lastPD
			}
			d = max(d, *last)
			*last = d
		}
		e := e
		epoch := w.dEpoch
		w.at(d-w.now, func() {
			if toD {
				w.deliverD(x, e, epoch)
			} else {
				w.deliverP(x, e)
			}
		})
	}
	if kill {
		w.logf("x%d connection killed", x.idx)
		w.killConn(x)
	}
}

func (w *world) killConn(x *simXfer) {
	if x.connDead {
		return
	}
	x.connDead = true
	peer, epoch := x.peer, w.dEpoch
	w.at(w.lat(), func() {
		if epoch == w.dEpoch {
			w.dActs(w.table.Step(PeerLost{Peer: peer, Err: ErrClosed}))
		}
	})
	w.at(w.lat(), func() {
		if x.senderAlive {
			w.pActs(x, x.sender.Step(PeerLost{Err: ErrClosed}))
		}
	})
}

func (w *world) deliverD(x *simXfer, b []byte, epoch int) {
	if epoch != w.dEpoch {
		return // sent to a decode process that has since died
	}
	f, err := Decode(b, w.maxFrame)
	if err != nil {
		w.logf("x%d D got bad frame: %v", x.idx, err)
		w.dActs(w.table.Step(BadFrame{Peer: x.peer, Err: err}))
		w.killConn(x)
		return
	}
	w.logf("x%d D <- %v seq=%d", x.idx, f.Type, f.Seq)
	x.recorded = append(x.recorded, b)
	w.dActs(w.table.Step(FrameIn{Peer: x.peer, From: simPrefill, Frame: f}))
	if w.sc == scIntruder && f.Type == TypeOpen && !x.intruded {
		x.intruded = true
		w.at(time.Duration(w.rng.IntN(40))*time.Millisecond, func() { w.intrude(x) })
	}
}

func (w *world) deliverP(x *simXfer, b []byte) {
	if !x.senderAlive {
		return
	}
	f, err := Decode(b, w.maxFrame)
	if err != nil {
		w.logf("x%d P got bad frame: %v", x.idx, err)
		w.pActs(x, x.sender.Step(BadFrame{Err: err}))
		w.killConn(x)
		return
	}
	w.logf("x%d P <- %v credit=%d", x.idx, f.Type, f.Credit)
	x.lastInbound = f.Type == TypeAbort
	w.pActs(x, x.sender.Step(FrameIn{Frame: f}))
	x.lastInbound = false
}

// dActs carries out the decode table's actions.
func (w *world) dActs(acts []Action) {
	for _, a := range acts {
		switch a := a.(type) {
		case SendFrame:
			if a.Peer == routerPeer {
				if x := w.byID[a.Frame.ID]; x != nil && a.Frame.Type == TypeCancelled {
					w.at(w.lat(), func() { x.cancelAcked = true })
				}
				continue
			}
			if x := w.byPeer[a.Peer]; x != nil {
				w.transmit(x, false, a.Frame)
			}
		case WriteKV:
			x := w.byID[a.ID]
			if x == nil || x.dSeq == nil || x.dReleased || x.dReady || x.dCrashed {
				w.violate("WriteKV for a transfer with no live reservation (%v)", a.ID)
				return
			}
			x.pendingW++
			// The coverage check's promise, at the moment decode asks: no
			// cell is ever written twice, even in a transfer that fails.
			for t := a.TokFrom; t < a.TokTo; t++ {
				for l := a.LayerFrom; l < a.LayerTo; l++ {
					if x.issued[t*w.layers+l]++; x.issued[t*w.layers+l] > 1 {
						w.violate("x%d decode asked to write token %d layer %d twice", x.idx, t, l)
					}
				}
			}
			epoch := w.dEpoch
			delay := w.lat()
			if w.sc == scSlowWrites {
				delay = time.Duration(w.rng.IntN(200)) * time.Millisecond
			}
			w.at(delay, func() {
				if epoch != w.dEpoch {
					return
				}
				x.pendingW--
				// Most transfers fold the digest as they write; every third
				// applies plainly, so Sum must fall back to reading the pages.
				apply := a.ApplyReadBack
				if x.idx%3 == 2 {
					apply = a.Apply
				}
				err := apply(x.dSeq, w.kvdim)
				if err != nil {
					w.violate("x%d write %d landed on pages it may not touch: %v", x.idx, a.Seq, err)
					return
				}
				for t := a.TokFrom; t < a.TokTo; t++ {
					for l := a.LayerFrom; l < a.LayerTo; l++ {
						x.writes[t*w.layers+l]++
					}
				}
				w.dActs(w.table.Step(WriteDone{ID: a.ID, Seq: a.Seq}))
			})
		case ComputeDigest:
			x := w.byID[a.ID]
			x.pendingD = true
			epoch := w.dEpoch
			w.at(w.lat(), func() {
				if epoch != w.dEpoch {
					return
				}
				x.pendingD = false
				sum, err := a.Sum(x.dSeq, w.layers, w.kvdim)
				// The folded digest must be the digest of the pages.
				if full, ferr := Digest(x.dSeq, a.Tokens, w.layers, w.kvdim); (err == nil) != (ferr == nil) || err == nil && sum != full {
					w.violate("x%d folded digest %x (%v), digest of the pages %x (%v)", x.idx, sum[:4], err, full[:4], ferr)
				}
				w.dActs(w.table.Step(DigestDone{ID: a.ID, Sum: sum, Err: err}))
			})
		case MarkReady:
			x := w.byID[a.ID]
			w.checkReady(x, a)
			x.dReady, x.readyTokens = true, a.Tokens
			w.logf("x%d D READY", x.idx)
			// The engine decodes, then frees the sequence.
			epoch := w.dEpoch
			w.at(w.lat(), func() {
				if epoch == w.dEpoch && !x.engineFreed {
					x.engineFreed = true
					x.dSeq.Free()
				}
			})
		case Fail:
			x := w.byID[a.ID]
			if x == nil {
				continue
			}
			if x.dReady || x.dFailed {
				w.violate("x%d decode failed after %s: %v", x.idx, map[bool]string{true: "Ready", false: "failing"}[x.dReady], a.Err)
			}
			x.dFailed, x.dErr = true, a.Err
			w.logf("x%d D FAIL %v", x.idx, a.Err)
			w.routerOnFailure(x)
		case Release:
			x := w.byID[a.ID]
			if x.pendingW > 0 || x.pendingD {
				w.violate("x%d decode released its pages with %d writes and digest=%v in flight", x.idx, x.pendingW, x.pendingD)
			}
			if x.dReleased || x.dReady {
				w.violate("x%d decode released twice or after Ready", x.idx)
			}
			x.dReleased = true
			x.dSeq.Free()
		}
	}
}

// pActs carries out one sender's actions.
func (w *world) pActs(x *simXfer, acts []Action) {
	for _, a := range acts {
		switch a := a.(type) {
		case SendFrame:
			x.pFrames++
			if a.Frame.Type == TypeData {
				if x.pSent == nil {
					x.pSent = map[uint32]bool{}
				}
				if x.pSent[a.Frame.Seq] {
					x.pResent++
				}
				x.pSent[a.Frame.Seq] = true
			}
			w.logf("x%d P -> %v seq=%d", x.idx, a.Frame.Type, a.Frame.Seq)
			w.transmit(x, true, a.Frame)
			if f := a.Frame; w.sc == scOverlap && f.Type == TypeData && f.Seq == 0 && x.pFrames <= 2 {
				w.transmit(x, true, w.forge(f))
			}
		case Done:
			if !x.dReady {
				w.violate("x%d prefill saw ACK but decode is not Ready", x.idx)
			}
			x.pDone = true
		case Fail:
			if x.pDone || x.pFailed {
				w.violate("x%d prefill failed after ending", x.idx)
			}
			x.pFailed, x.pErr, x.pFailAbort = true, a.Err, x.lastInbound
			w.logf("x%d P FAIL %v", x.idx, a.Err)
			w.routerOnFailure(x)
		case Release:
			if !x.pDone && !x.pFailed {
				w.violate("x%d prefill released pages before ACK or failure", x.idx)
			}
			if x.pReleased {
				w.violate("x%d prefill released twice", x.idx)
			}
			x.pReleased = true
			if err := x.lease.Release(); err != nil {
				w.violate("x%d lease release: %v", x.idx, err)
			}
		}
	}
}

// checkReady is the heart of the safety check: decode may become Ready
// only with every (token, layer) of the admitted prompt written exactly
// once, with the sender's bytes.
func (w *world) checkReady(x *simXfer, a MarkReady) {
	if a.Tokens != x.n {
		w.violate("x%d Ready with %d tokens, the router admitted %d", x.idx, a.Tokens, x.n)
		return
	}
	if x.pendingW > 0 {
		w.violate("x%d Ready with %d writes in flight", x.idx, x.pendingW)
	}
	for c := 0; c < x.n*w.layers; c++ {
		if x.writes[c] != 1 {
			w.violate("x%d Ready but token %d layer %d was written %d times", x.idx, c/w.layers, c%w.layers, x.writes[c])
			return
		}
	}
	k := make([]float32, x.n*w.kvdim)
	v := make([]float32, x.n*w.kvdim)
	for l := range w.layers {
		if err := x.dSeq.ReadTokens(l, 0, x.n, k, v); err != nil {
			w.violate("x%d Ready but layer %d is not readable: %v", x.idx, l, err)
			return
		}
		for i := range k {
			if math.Float32bits(k[i]) != math.Float32bits(x.truthK[l][i]) || math.Float32bits(v[i]) != math.Float32bits(x.truthV[l][i]) {
				w.violate("x%d Ready but layer %d float %d differs from what prefill computed", x.idx, l, i)
				return
			}
		}
	}
}

// routerOnFailure is the router model: the first failure on either leg
// cancels the other (the cancel to decode is acknowledged and retried).
func (w *world) routerOnFailure(x *simXfer) {
	if x.senderAlive && !x.sender.Terminal() {
		w.at(w.lat(), func() {
			if x.senderAlive {
				w.pActs(x, x.sender.Step(Cancel{ID: x.sendID}))
			}
		})
	}
	if x.reserved && !x.dReady {
		w.sendCancel(x)
	}
}

// sendCancel sends CANCEL to decode over the lossy router link, retrying
// until CANCELLED comes back.
func (w *world) sendCancel(x *simXfer) {
	if x.cancelSent {
		return
	}
	x.cancelSent = true
	var try func()
	try = func() {
		if x.cancelAcked {
			return
		}
		if w.rng.Float64() >= w.routerDrop {
			epoch := w.dEpoch
			w.at(w.lat(), func() {
				if epoch == w.dEpoch {
					w.dActs(w.table.Step(FrameIn{Peer: routerPeer, From: simRouter, Router: true, Frame: &Frame{Type: TypeCancel, ID: x.id, Code: CodeCancelled, Reason: "router cancel"}}))
				}
			})
		}
		w.at(w.retry, try)
	}
	try()
}

// checkStep runs after every event.
func (w *world) checkStep() {
	if v := w.dPool.Violations() + w.pPool.Violations(); v != 0 {
		w.violate("kv ownership violations: %d", v)
	}
	leases := 0
	for _, x := range w.xs {
		if x.lease != nil && !x.pReleased {
			leases++
		}
		if x.pDone && !x.dReady {
			w.violate("x%d prefill acknowledged without decode Ready", x.idx)
		}
		if x.dReady && x.dFailed {
			w.violate("x%d both Ready and failed on decode", x.idx)
		}
	}
	if st := w.pPool.Stats(); st.Leases != leases {
		w.violate("prefill pool has %d leases, %d senders unreleased", st.Leases, leases)
	}
}

// checkEnd checks liveness and the end state once the queue drains.
func (w *world) checkEnd() {
	for _, x := range w.xs {
		switch {
		case x.reserved && !x.dCrashed && !x.dReady && !(x.dFailed && x.dReleased):
			w.violate("x%d decode never finished: ready=%v failed=%v released=%v", x.idx, x.dReady, x.dFailed, x.dReleased)
		case x.pStarted && !x.pCrashed && !(x.pReleased && (x.pDone || x.pFailed)):
			w.violate("x%d prefill never finished: %v", x.idx, x.sender)
		case x.cancelSent && !x.cancelAcked:
			w.violate("x%d router cancel never acknowledged", x.idx)
		case x.dFailed && x.pDone:
			w.violate("x%d decode failed but prefill saw ACK", x.idx)
		case x.dReady && x.pFailAbort:
			w.violate("x%d decode Ready but told prefill it aborted", x.idx)
		case x.rejectedAtP && (x.pFrames != 0 || x.dReady):
			w.violate("x%d rejected by prefill admission, yet it sent %d frames (ready=%v)", x.idx, x.pFrames, x.dReady)
		case x.badPayload && x.dReady:
			w.violate("x%d Ready with a payload the sender damaged", x.idx)
		}
	}
	if w.table.Live() != 0 {
		w.violate("decode table still holds %d live transfers", w.table.Live())
	}
	for name, p := range map[string]*kv.Pool{"prefill": w.pPool, "decode": w.dPool} {
		st := p.Stats()
		if st.Free != st.Pages || st.Leases != 0 {
			w.violate("%s pool: %d of %d pages free, %d leases at the end", name, st.Free, st.Pages, st.Leases)
		}
		if err := p.CheckScrubbed(); err != nil {
			w.violate("%s pool: %v", name, err)
		}
	}
}

func (w *world) dump() string {
	return strings.Join(w.trace[max(0, len(w.trace)-60):], "\n")
}
