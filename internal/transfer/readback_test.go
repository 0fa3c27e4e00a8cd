package transfer

import (
	"slices"
	"testing"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/errkind"
	"github.com/bulkhead-llm/bulkhead/internal/kv"
	"github.com/bulkhead-llm/bulkhead/internal/model"
)

// decodeSeq is what the in-memory driver writes into and digests.
type decodeSeq interface {
	KVWriter
	KVReader
}

// xferOutcome is how an in-memory transfer ended on decode.
type xferOutcome struct {
	ready  bool
	err    *errkind.Error
	folded bool      // the digest came from the read-back fold, not the pages
	rb     *readBack // the fold ComputeDigest carried
}

// moveKV runs one transfer from s into a reservation of tbl, frames going
// through Encode and Decode, writes applied with ApplyReadBack to dst.
// With reverse, each batch of DATA frames arrives in reverse order.
// release is called when the Sender says Release.
func moveKV(t *testing.T, s *Sender, tbl *Table, dst decodeSeq, layers, kvdim int, reverse bool, release func()) xferOutcome {
	t.Helper()
	var res xferOutcome
	wire := func(f *Frame) *Frame {
		b, err := f.Encode(nil, DefaultMaxFrameBytes)
		if err != nil {
			t.Fatalf("encode %v: %v", f.Type, err)
		}
		g, err := Decode(b, DefaultMaxFrameBytes)
		if err != nil {
			t.Fatalf("decode %v: %v", f.Type, err)
		}
		return g
	}
	var toP []*Frame
	var dActs func([]Action)
	dActs = func(acts []Action) {
		for _, a := range acts {
			switch a := a.(type) {
			case SendFrame:
				toP = append(toP, wire(a.Frame))
			case WriteKV:
				dActs(tbl.Step(WriteDone{ID: a.ID, Seq: a.Seq, Err: a.ApplyReadBack(dst, kvdim)}))
			case ComputeDigest:
				if res.rb = a.rb; a.rb != nil {
					_, res.folded = a.rb.finish(dst, a.Tokens, layers, kvdim)
				}
				sum, err := a.Sum(dst, layers, kvdim)
				dActs(tbl.Step(DigestDone{ID: a.ID, Sum: sum, Err: err}))
			case MarkReady:
				res.ready = true
			case Fail:
				res.err = a.Err
			}
		}
	}
	pActs := func(acts []Action) {
		var data []*Frame
		for _, a := range acts {
			switch a := a.(type) {
			case SendFrame:
				f := wire(a.Frame)
				if f.Type == TypeData {
					data = append(data, f)
					continue
				}
				if reverse {
					slices.Reverse(data)
				}
				for _, d := range data {
					dActs(tbl.Step(FrameIn{Peer: 1, Frame: d}))
				}
				data = data[:0]
				dActs(tbl.Step(FrameIn{Peer: 1, Frame: f}))
			case Release:
				release()
			}
		}
		if reverse {
			slices.Reverse(data)
		}
		for _, d := range data {
			dActs(tbl.Step(FrameIn{Peer: 1, Frame: d}))
		}
	}
	pActs(s.Step(Start{}))
	for i := 0; len(toP) > 0 && i < 10000; i++ {
		f := toP[0]
		toP = toP[1:]
		pActs(s.Step(FrameIn{Frame: f}))
	}
	if !s.Terminal() {
		t.Fatalf("transfer stuck: %v", s)
	}
	return res
}

// newXfer reserves and builds a sender for n tokens of src.
func newXfer(t *testing.T, src KVSource, n, layers, kvdim, maxFrame int) (*Sender, *Table) {
	t.Helper()
	id := NewID()
	tbl := NewTable(TableConfig{})
	if err := tbl.Reserve(Reservation{ID: id, Tenant: "a", Tokens: n, MaxNew: 1, Layers: layers, KVDim: kvdim,
		Deadline: time.Minute, Window: 1000, MaxFrameBytes: maxFrame}); err != nil {
		t.Fatal(err)
	}
	s, err := NewSender(SenderConfig{ID: id, Tenant: "a", Tokens: n, Layers: layers, KVDim: kvdim, Source: src,
		MaxFrameBytes: maxFrame, Window: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return s, tbl
}

// TestReadBackDigest checks that the digest folded from read-backs is the
// digest of the pages, in order and out of order, with frames of whole
// tokens and frames of a few layers of one token, and that the fold, not
// a fallback, produced it.
//
// It runs both ways of applying: copying into the memory kv.Seq lends for
// writing while checksumming (WriteSpans, copyIn; at kvdim 64 through the
// assembly kernel), and, for a sequence that only takes WriteTokens,
// writing and then reading back.
func TestReadBackDigest(t *testing.T) {
	const n, layers = 11, 3
	for _, kvdim := range []int{8, 64} {
		for _, through := range []bool{true, false} {
			for _, maxFrame := range []int{MinMaxFrameBytes, 2 * MinMaxFrameBytes, DefaultMaxFrameBytes} {
				for _, reverse := range []bool{false, true} {
					_, src := filledSeq(t, n, layers, kvdim, 7)
					lease, _ := src.Lease()
					dpool, _ := kv.NewPool(kv.PoolConfig{Pages: 16, PageSize: 4, Layers: layers, KVDim: kvdim})
					dst, _ := dpool.Alloc(kv.Owner{Tenant: "a", Request: 9}, n+1)
					var into decodeSeq = dst
					if !through {
						into = writesOnly{dst}
					}
					s, tbl := newXfer(t, lease, n, layers, kvdim, maxFrame)
					released := false
					res := moveKV(t, s, tbl, into, layers, kvdim, reverse, func() { released = true; lease.Release() })
					if !res.ready || !res.folded || !released {
						t.Fatalf("kvdim %d, through %v, frame limit %d, reverse %v: ready %v (%v), folded %v, released %v",
							kvdim, through, maxFrame, reverse, res.ready, res.err, res.folded, released)
					}
					want, _ := Digest(readerOnly{src}, n, layers, kvdim)
					got, _ := Digest(dst, n, layers, kvdim)
					if got != want {
						t.Fatal("decode's pages differ from prefill's")
					}
				}
			}
		}
	}
}

// plainSeq is a kv.Seq less WriteSpans: what writesOnly and misplacing
// pass on.
type plainSeq interface {
	decodeSeq
	rangeSpanner
	kvSpanner
}

// writesOnly is a decode sequence that takes writes only through
// WriteTokens, so ApplyReadBack writes and then reads back.
type writesOnly struct{ plainSeq }

// Ways misplacing writes KV somewhere other than where it belongs.
const (
	swapTokens = iota // the first two tokens of a range swapped
	swapKV            // K written as V and V as K
	nextLayer         // layer l's KV into layer (l+1) % layers
)

// misplacing is a decode sequence with a placement bug. Under swapTokens
// and swapKV every position is still written exactly once, so only the
// digest can notice.
type misplacing struct {
	plainSeq
	layers, kvdim int
	how           int
}

func (m misplacing) WriteTokens(layer, from, to int, k, v []float32) error {
	switch m.how {
	case nextLayer:
		layer = (layer + 1) % m.layers
	case swapKV:
		k, v = v, k
	case swapTokens:
		if to-from >= 2 {
			kd := m.kvdim
			k, v = slices.Clone(k), slices.Clone(v)
			for _, x := range [][]float32{k, v} {
				a, b := slices.Clone(x[:kd]), x[kd:2*kd]
				copy(x[:kd], b)
				copy(x[kd:2*kd], a)
			}
		}
	}
	return m.plainSeq.WriteTokens(layer, from, to, k, v)
}

// misplacingThrough has the same bugs in the memory it lends for writing
// (WriteSpans), so the copy that checksums as it stores puts KV in the
// wrong place.
type misplacingThrough struct {
	misplacing
	seq *kv.Seq
}

func (m misplacingThrough) WriteSpans(dst []model.Span, layer, from, to int) ([]model.Span, error) {
	if m.how == nextLayer {
		layer = (layer + 1) % m.layers
	}
	lent, err := m.seq.WriteSpans(nil, layer, from, to)
	if err != nil {
		return dst, err
	}
	kd := m.kvdim
	var one []model.Span // one span per token
	for _, sp := range lent {
		for i := 0; i < len(sp.K)/kd; i++ {
			k, v := sp.K[i*kd:(i+1)*kd:(i+1)*kd], sp.V[i*kd:(i+1)*kd:(i+1)*kd]
			if m.how == swapKV {
				k, v = v, k
			}
			one = append(one, model.Span{K: k, V: v, Type: sp.Type})
		}
	}
	if m.how == swapTokens && len(one) >= 2 {
		one[0], one[1] = one[1], one[0]
	}
	return append(dst, one...), nil
}

// TestReadBackCatchesMisplacedWrite shows that folding the digest from
// read-backs still catches KV written to the wrong place: decode never
// becomes Ready. A misplacement that writes every position once fails as
// a digest mismatch; one into the wrong layer is already caught reading
// back a position the write skipped.
func TestReadBackCatchesMisplacedWrite(t *testing.T) {
	const n, layers, kvdim = 11, 3, 8
	for _, how := range []int{swapTokens, swapKV, nextLayer} {
		for _, maxFrame := range []int{MinMaxFrameBytes, DefaultMaxFrameBytes} {
			_, src := filledSeq(t, n, layers, kvdim, 3)
			dpool, _ := kv.NewPool(kv.PoolConfig{Pages: 16, PageSize: 4, Layers: layers, KVDim: kvdim})
			dst, _ := dpool.Alloc(kv.Owner{Tenant: "a", Request: 9}, n+1)
			s, tbl := newXfer(t, src, n, layers, kvdim, maxFrame)
			res := moveKV(t, s, tbl, misplacing{plainSeq: dst, layers: layers, kvdim: kvdim, how: how}, layers, kvdim, false, func() {})
			want := CodeDigest
			if how == nextLayer {
				want = CodeWrite
			}
			if res.ready || res.err == nil || res.err.Code != want || how != nextLayer && !res.folded {
				t.Fatalf("misplacement %d, frame limit %d: ready %v, err %v, folded %v", how, maxFrame, res.ready, res.err, res.folded)
			}

			// The same bugs in the memory lent for writing: the fold
			// records where each vector was stored, Sum sees that it is
			// not where the sequence's spans put it at commit and digests
			// the pages instead, which differ (every layer's KV one layer
			// on also writes every position once).
			_, src = filledSeq(t, n, layers, kvdim, 3)
			dst, _ = dpool.Alloc(kv.Owner{Tenant: "a", Request: 10}, n+1)
			s, tbl = newXfer(t, src, n, layers, kvdim, maxFrame)
			res = moveKV(t, s, tbl, misplacingThrough{misplacing{plainSeq: dst, layers: layers, kvdim: kvdim, how: how}, dst}, layers, kvdim, false, func() {})
			if res.ready || res.err == nil || res.err.Code != CodeDigest || res.folded {
				t.Fatalf("misplacement %d through WriteSpans, frame limit %d: ready %v, err %v, folded %v", how, maxFrame, res.ready, res.err, res.folded)
			}
		}
	}
}

// aliasedSeq is a decode sequence with a placement bug the read-back
// alone cannot see: tokens 0 and 1 share one location, so a later write
// of token 1 overwrites token 0 after token 0 was read back. Pages are
// one token each.
type aliasedSeq struct {
	layers, kvdim int
	k, v          [][]float32 // per layer, [slot][kvdim]
	written       [][]bool
}

func newAliasedSeq(n, layers, kvdim int) *aliasedSeq {
	a := &aliasedSeq{layers: layers, kvdim: kvdim}
	for range layers {
		a.k, a.v = append(a.k, make([]float32, n*kvdim)), append(a.v, make([]float32, n*kvdim))
		a.written = append(a.written, make([]bool, n))
	}
	return a
}

func (a *aliasedSeq) slot(t int) int { return max(t-1, 0) }

func (a *aliasedSeq) span(l, t int) model.Span {
	s, kd := a.slot(t), a.kvdim
	return model.Span{K: a.k[l][s*kd : (s+1)*kd : (s+1)*kd], V: a.v[l][s*kd : (s+1)*kd : (s+1)*kd]}
}

func (a *aliasedSeq) WriteTokens(l, from, to int, k, v []float32) error {
	for t := from; t < to; t++ {
		sp, i := a.span(l, t), (t-from)*a.kvdim
		copy(sp.K, k[i:i+a.kvdim])
		copy(sp.V, v[i:i+a.kvdim])
		a.written[l][t] = true
	}
	return nil
}

func (a *aliasedSeq) ReadTokens(l, from, to int, k, v []float32) error {
	for t := from; t < to; t++ {
		sp, i := a.span(l, t), (t-from)*a.kvdim
		copy(k[i:i+a.kvdim], sp.K)
		copy(v[i:i+a.kvdim], sp.V)
	}
	return nil
}

func (a *aliasedSeq) Spans(dst []model.Span, l, n int) ([]model.Span, error) {
	for t := range n {
		dst = append(dst, a.span(l, t))
	}
	return dst, nil
}

func (a *aliasedSeq) SpansRange(dst []model.Span, l, from, to int) ([]model.Span, error) {
	for t := from; t < to; t++ {
		dst = append(dst, a.span(l, t))
	}
	return dst, nil
}

// TestReadBackCatchesSharedLocation shows the check that keeps the fold
// honest when two tokens share a location: frames arrive in order, so
// token 0 is read back before token 1's write overwrites it, and the
// fold alone would match the sender's digest. Sum sees the overlapping
// spans, computes the digest of the pages instead, and the transfer
// fails.
func TestReadBackCatchesSharedLocation(t *testing.T) {
	// 512-byte cells: a frame holds one layer of one token, so token 0
	// is written and read back before token 1 overwrites it.
	const n, layers, kvdim = 6, 2, 64
	_, src := filledSeq(t, n, layers, kvdim, 5)
	s, tbl := newXfer(t, src, n, layers, kvdim, MinMaxFrameBytes)
	dst := newAliasedSeq(n, layers, kvdim)
	res := moveKV(t, s, tbl, dst, layers, kvdim, false, func() {})
	if res.ready || res.err == nil || res.err.Code != CodeDigest || res.folded {
		t.Fatalf("ready %v, err %v, folded %v", res.ready, res.err, res.folded)
	}
	// The fold itself was complete and matched the sender: only the
	// overlap check stood between this bug and a Ready sequence.
	if rb := res.rb; rb == nil || rb.broken || rb.n != n*layers || rb.combined() != s.commit.Digest {
		t.Fatal("the fold did not match the sender; the test no longer shows what it should")
	}
}
