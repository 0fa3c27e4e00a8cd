package decodesrv

import (
	"context"
	"errors"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/errkind"
	"github.com/bulkhead-llm/bulkhead/internal/kv"
	"github.com/bulkhead-llm/bulkhead/internal/transfer"
)

// reservation is a live transfer's sequence and the generate request
// waiting for it. The loop owns it until the outcome is sent.
type reservation struct {
	seq     *kv.Seq
	outcome chan outcome // capacity 1; exactly one value, ever
	told    bool
}

// outcome ends the wait of a generate request: Ready (the sequence now
// belongs to the request) or an error (the loop frees the sequence once
// the Table releases it).
type outcome struct {
	ready  bool
	tokens int
	first  int32
	err    *errkind.Error
}

// loop owns the Table: every event and command runs here, one at a time.
func (s *Server) loop(ctx context.Context) {
	defer close(s.loopDone)
	tick := time.NewTicker(s.opts.TickEvery)
	defer tick.Stop()
	for {
		select {
		case f := <-s.cmds:
			f()
		case <-tick.C:
			s.step(transfer.Tick{Now: s.now()})
		case <-ctx.Done():
			return
		}
	}
}

func (s *Server) now() time.Duration { return time.Since(s.start) }

// post queues f for the loop; false once the loop has stopped.
func (s *Server) post(f func()) bool {
	select {
	case s.cmds <- f:
		return true
	case <-s.loopDone:
		return false
	}
}

// call runs f on the loop and waits for it; false if the loop stopped
// first (f may then not have run).
func (s *Server) call(f func()) bool {
	done := make(chan struct{})
	if !s.post(func() { f(); close(done) }) {
		return false
	}
	select {
	case <-done:
		return true
	case <-s.loopDone:
		select {
		case <-done:
			return true
		default:
			return false
		}
	}
}

// step feeds ev to the Table and carries out the actions (loop only).
func (s *Server) step(ev transfer.Event) {
	s.apply(s.table.Step(ev))
}

// apply carries out actions in order; writes and digests are done at
// once and their confirmations fed straight back (loop only).
func (s *Server) apply(acts []transfer.Action) {
	for len(acts) > 0 {
		a := acts[0]
		acts = acts[1:]
		switch a := a.(type) {
		case transfer.SendFrame:
			if c := s.conns[a.Peer]; c != nil {
				c.send(a.Frame)
			}
		case transfer.WriteKV:
			err := errors.New("no sequence for this transfer")
			if r := s.res[a.ID]; r != nil {
				err = a.ApplyReadBack(r.seq, s.kvDim)
			}
			acts = append(acts, s.table.Step(transfer.WriteDone{ID: a.ID, Seq: a.Seq, Err: err})...)
		case transfer.ComputeDigest:
			var sum [32]byte
			err := errors.New("no sequence for this transfer")
			if r := s.res[a.ID]; r != nil {
				sum, err = a.Sum(r.seq, s.layers, s.kvDim)
			}
			acts = append(acts, s.table.Step(transfer.DigestDone{ID: a.ID, Sum: sum, Err: err})...)
		case transfer.MarkReady:
			if r := s.res[a.ID]; r != nil {
				delete(s.res, a.ID) // the generate request owns the sequence now
				r.tell(outcome{ready: true, tokens: a.Tokens, first: a.FirstToken})
			}
			s.tm.Completed.Inc()
		case transfer.Fail:
			if r := s.res[a.ID]; r != nil {
				r.tell(outcome{err: a.Err})
			}
			s.tm.Failed.WithLabelValues(a.Err.Code).Inc()
			s.log.Info("kv transfer failed", "id", a.ID.String(), "code", a.Err.Code, "error", a.Err.Message)
		case transfer.SenderRefused:
			s.wrongSender(a)
		case transfer.Release:
			if r := s.res[a.ID]; r != nil {
				r.seq.Free()
				delete(s.res, a.ID)
			}
		}
	}
	s.live.Store(int64(s.table.Live()))
}

func (r *reservation) tell(o outcome) {
	if !r.told {
		r.told = true
		r.outcome <- o
	}
}
