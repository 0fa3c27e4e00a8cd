package transfer

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/errkind"
)

// Defaults for SenderConfig and Reservation fields left zero.
const (
	DefaultWindow = 16
	DefaultLease  = 30 * time.Second
	DefaultRetry  = 500 * time.Millisecond
)

// SenderConfig describes one outgoing transfer. Tokens is the prompt
// length the router admitted; the KV of every one of them is sent.
type SenderConfig struct {
	ID     ID
	Tenant string
	Tokens int
	// MaxTokens is the prefill side's own input limit (0: none). A
	// transfer over it fails at Start with CodeTooLong and sends nothing:
	// never a shorter stand-in.
	MaxTokens int
	// Layers and KVDim are the KV layout; KVDim counts 4-byte storage
	// words per token per layer (kv.PoolConfig.RowWords), which is what
	// makes the protocol indifferent to the cache's element type.
	Layers, KVDim int
	FirstToken    int32
	// Source reads the prefill KV; a kv.Lease taken when prefill finished
	// is the intended one. A Source that pins the pages it lends (a
	// kv.Lease: Spans and Live) is sent from in place: DATA frames alias
	// its pages, under the rule in alias.go (the edge sends every frame
	// before it carries out the Release that lets the pages go). Any
	// other Source is read inside Step into buffers the frames own.
	Source        KVSource
	MaxFrameBytes int           // 0: DefaultMaxFrameBytes
	Window        int           // DATA frames unacknowledged at most; 0: DefaultWindow
	Lease         time.Duration // from Start to ACK, at most; 0: DefaultLease
	Retry         time.Duration // retransmit after this long without progress; 0: DefaultRetry
}

// KVSource is what a Sender reads KV from (kv.Lease, kv.Seq).
type KVSource = KVReader

type senderState uint8

const (
	sIdle senderState = iota
	sOpening
	sStreaming
	sCommitted
	sDone
	sFailed
)

var senderStateNames = [...]string{"idle", "opening", "streaming", "committed", "done", "failed"}

func (s senderState) String() string { return senderStateNames[s] }

// Sender is the prefill side of one transfer: a pure state machine. It
// owns no goroutine, socket or clock; the edge feeds it events and carries
// out the actions Step returns, in order.
type Sender struct {
	cfg   SenderConfig
	state senderState

	now, deadline, progress time.Duration

	window, maxFrame int
	// Frame plan: frame seq covers tokens [t, t+tokPer) x all layers when
	// layPer == Layers, else token seq/chunks, layers chunk (seq%chunks).
	tokPer, layPer, chunks, frames int

	next, credit uint32 // next seq never sent; every seq < credit received
	commit       *Frame

	// The digest is folded in as each frame's KV is first read, instead
	// of reading the whole prompt's KV again at commit: sums holds the
	// per-token checksums Digest would compute, summed is the next seq to
	// fold, tokCRC the checksum of a token so far when its layers span
	// several frames. blocks is scratch for checksum; comb combines CRCs
	// of one K or V vector (crc.go).
	sums   []byte
	summed uint32
	tokCRC uint32
	blocks []uint32
	comb   *crcCombiner
	// keptSums and readSums count frames by where their checksums came
	// from (ChecksumSources).
	keptSums, readSums int

	// ip is the Source's pinned pages when frames are sent from them in
	// place, taken at the first frame (lent); nil: frames copy (alias.go).
	ip   *inPlace
	lent bool

	released bool
	err      *errkind.Error

	// corrupt, when set by a test, damages a payload after it is read and
	// before it is framed: a fault only the digest check can catch.
	corrupt func(seq uint32, data []float32)
}

// NewSender checks cfg and returns a Sender in its idle state; Step(Start)
// begins the transfer.
func NewSender(cfg SenderConfig) (*Sender, error) {
	switch {
	case cfg.ID.IsZero():
		return nil, errf(errkind.Internal, CodeProtocol, "sender needs a transfer id")
	case cfg.Tokens <= 0 || cfg.Tokens > 1<<31:
		return nil, errf(errkind.BadInput, CodeProtocol, "sender of %d tokens", cfg.Tokens)
	case cfg.Layers <= 0 || cfg.Layers > 1<<15 || cfg.KVDim <= 0 || cfg.KVDim > 1<<24:
		return nil, errf(errkind.Internal, CodeProtocol, "sender layout %d layers x %d kvdim", cfg.Layers, cfg.KVDim)
	case cfg.Source == nil:
		return nil, errf(errkind.Internal, CodeProtocol, "sender needs a KV source")
	case len(cfg.Tenant) > MaxString:
		return nil, errf(errkind.BadInput, CodeProtocol, "tenant name of %d bytes", len(cfg.Tenant))
	}
	if cfg.MaxFrameBytes == 0 {
		cfg.MaxFrameBytes = DefaultMaxFrameBytes
	}
	if cfg.Window <= 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.Lease <= 0 {
		cfg.Lease = DefaultLease
	}
	if cfg.Retry <= 0 {
		cfg.Retry = DefaultRetry
	}
	if cfg.MaxFrameBytes < MinMaxFrameBytes {
		return nil, errf(errkind.Internal, CodeProtocol, "frame limit %d bytes, at least %d", cfg.MaxFrameBytes, MinMaxFrameBytes)
	}
	return &Sender{cfg: cfg, window: cfg.Window, maxFrame: cfg.MaxFrameBytes}, nil
}

// ID is the transfer's id.
func (s *Sender) ID() ID { return s.cfg.ID }

// State names the current state, for logs and tests.
func (s *Sender) State() string { return s.state.String() }

// Terminal reports whether the transfer has ended (acknowledged or failed).
func (s *Sender) Terminal() bool { return s.state >= sDone }

// Released reports whether Release has been emitted.
func (s *Sender) Released() bool { return s.released }

// Err is the failure, once the state is failed.
func (s *Sender) Err() *errkind.Error { return s.err }

// Step applies one event and returns the actions it calls for.
func (s *Sender) Step(ev Event) []Action {
	var out []Action
	switch e := ev.(type) {
	case Start:
		if s.state != sIdle {
			return nil
		}
		s.now, s.progress, s.deadline = e.Now, e.Now, e.Now+s.cfg.Lease
		n, err := admitTokens(s.cfg.Tokens, s.cfg.MaxTokens)
		if err != nil {
			return s.fail(out, err, false)
		}
		s.cfg.Tokens = n
		s.state = sOpening
		out = append(out, s.send(s.openFrame()))
	case Tick:
		if e.Now > s.now {
			s.now = e.Now
		}
		out = s.tick(out)
	case FrameIn:
		if e.Frame == nil || s.state == sIdle || e.Frame.ID != s.cfg.ID && !connAbort(e.Frame) {
			return nil
		}
		out = s.frame(out, e.Frame)
	case BadFrame:
		if s.state >= sOpening && !s.Terminal() {
			out = s.fail(out, errf(errkind.Integrity, CodeChecksum, "corrupted frame from decode: %v", e.Err), true)
		}
	case PeerLost:
		if s.state >= sOpening && !s.Terminal() {
			out = s.fail(out, errf(errkind.Unavailable, CodePeerLost, "decode connection lost: %v", e.Err), false)
		}
	case Cancel:
		if e.ID != s.cfg.ID {
			return nil
		}
		if !s.Terminal() {
			out = s.fail(out, cancelReason(e.Reason), s.state >= sOpening)
		}
		out = append(out, CancelDone{ID: s.cfg.ID, WasReady: s.state == sDone})
	}
	return out
}

func (s *Sender) tick(out []Action) []Action {
	if s.state < sOpening || s.Terminal() {
		return out
	}
	if s.now >= s.deadline {
		return s.fail(out, errf(errkind.Unavailable, CodeTimeout, "no acknowledgement from decode within %v (state %v)", s.cfg.Lease, s.state), true)
	}
	if s.now-s.progress < s.cfg.Retry {
		return out
	}
	// Nothing moved for a retry interval: something was lost. Resend what
	// is unacknowledged. Resent DATA is byte-identical (same seq, same
	// ranges, same payload), which the receiver ignores as a duplicate
	// while answering with CREDIT, so a lost CREDIT also recovers.
	s.progress = s.now
	switch s.state {
	case sOpening:
		out = append(out, s.send(s.openFrame()))
	case sStreaming, sCommitted:
		for seq := s.credit; seq < s.next; seq++ {
			f, err := s.dataFrame(seq)
			if err != nil {
				return s.fail(out, err, true)
			}
			out = append(out, s.send(f))
		}
		if s.commit != nil {
			out = append(out, s.send(s.commit))
		}
	}
	return out
}

func (s *Sender) frame(out []Action, f *Frame) []Action {
	switch f.Type {
	case TypeHello:
		if s.state != sOpening {
			return out // a duplicate HELLO
		}
		if f.Window > 0 && int(f.Window) < s.window {
			s.window = int(f.Window)
		}
		if f.MaxFrameBytes > 0 && int(f.MaxFrameBytes) < s.maxFrame {
			s.maxFrame = int(f.MaxFrameBytes)
		}
		if err := s.plan(); err != nil {
			return s.fail(out, err, true)
		}
		s.state, s.progress = sStreaming, s.now
		return s.pump(out)
	case TypeCredit:
		if s.state != sStreaming && s.state != sCommitted {
			return out
		}
		if f.Credit > s.next {
			return s.fail(out, errf(errkind.BadInput, CodeProtocol, "decode credited %d frames, only %d sent", f.Credit, s.next), true)
		}
		if f.Credit > s.credit {
			s.credit, s.progress = f.Credit, s.now
		}
		return s.pump(out)
	case TypeAck:
		switch s.state {
		case sCommitted:
			s.state = sDone
			s.released, s.ip = true, nil
			return append(out, Done{ID: s.cfg.ID}, Release{ID: s.cfg.ID})
		case sDone, sFailed:
			return out
		}
		return s.fail(out, errf(errkind.BadInput, CodeProtocol, "ACK before COMMIT (state %v)", s.state), true)
	case TypeAbort:
		if s.Terminal() {
			return out
		}
		return s.fail(out, fromFrame(f, "decode"), false)
	}
	return out
}

// connAbort reports whether f is an ABORT for the whole connection: the
// zero id, which no transfer uses, sent by a receiver that got a frame it
// could not attribute to any transfer (an OPEN corrupted in its id). Every
// transfer on that connection fails with its reason.
func connAbort(f *Frame) bool { return f.Type == TypeAbort && f.ID.IsZero() }

// pump sends DATA while the window allows, then COMMIT once every frame
// has been sent.
func (s *Sender) pump(out []Action) []Action {
	if s.state != sStreaming {
		return out
	}
	for int(s.next) < s.frames && s.next < s.credit+uint32(s.window) {
		f, err := s.dataFrame(s.next)
		if err != nil {
			return s.fail(out, err, true)
		}
		out = append(out, s.send(f))
		s.next++
	}
	if int(s.next) < s.frames {
		return out
	}
	var sum [32]byte
	if int(s.summed) == s.frames && s.sums != nil {
		sum = digestOf(s.cfg.Tokens, s.cfg.Layers, s.cfg.KVDim, s.sums)
	} else {
		var err error
		// One goroutine: a state machine starts none, not even briefly.
		if sum, err = digest(s.cfg.Source, s.cfg.Tokens, s.cfg.Layers, s.cfg.KVDim, 1); err != nil {
			return s.fail(out, errf(errkind.Internal, CodeWrite, "reading prefill KV for the digest: %v", err), true)
		}
	}
	s.commit = &Frame{Type: TypeCommit, ID: s.cfg.ID, Tokens: uint32(s.cfg.Tokens), Frames: uint32(s.frames), FirstToken: s.cfg.FirstToken, Digest: sum}
	s.state = sCommitted
	return append(out, s.send(s.commit))
}

// plan chooses the frame shape for the agreed frame limit: as many whole
// tokens (all layers) as fit, or, when one token does not fit, one token
// and as many layers as fit.
func (s *Sender) plan() *errkind.Error {
	cell := 8 * s.cfg.KVDim // K and V floats of one (token, layer)
	room := s.maxFrame - Overhead - DataHeaderSize
	if room < cell {
		return errf(errkind.BadInput, CodeProtocol, "frame limit %d bytes cannot hold one token of one layer (%d bytes)", s.maxFrame, cell+Overhead+DataHeaderSize)
	}
	L := s.cfg.Layers
	if per := room / (cell * L); per >= 1 {
		s.tokPer, s.layPer, s.chunks = per, L, 1
		s.frames = (s.cfg.Tokens + per - 1) / per
		return nil
	}
	s.tokPer, s.layPer = 1, room/cell
	s.chunks = (L + s.layPer - 1) / s.layPer
	s.frames = s.cfg.Tokens * s.chunks
	return nil
}

// span returns the ranges frame seq covers.
func (s *Sender) span(seq uint32) (tf, tt, lf, lt int) {
	if s.chunks == 1 {
		tf = int(seq) * s.tokPer
		return tf, min(tf+s.tokPer, s.cfg.Tokens), 0, s.cfg.Layers
	}
	tf, c := int(seq)/s.chunks, int(seq)%s.chunks
	lf = c * s.layPer
	return tf, tf + 1, lf, min(lf+s.layPer, s.cfg.Layers)
}

// dataFrame frames seq's KV: in place, as slices of the pinned pages,
// when the Source allows it (alias.go), else read into a buffer.
func (s *Sender) dataFrame(seq uint32) (*Frame, *errkind.Error) {
	tf, tt, lf, lt := s.span(seq)
	span := (tt - tf) * s.cfg.KVDim
	n := 2 * span * (lt - lf)
	if !s.lent {
		s.lent = true
		if src, ok := s.cfg.Source.(pinnedSource); ok && nativeLittleEndian && s.corrupt == nil {
			ip, ok, err := lend(src, s.cfg.Tokens, s.cfg.Layers, s.cfg.KVDim)
			if err != nil {
				return nil, errf(errkind.Internal, CodeWrite, "%v", err)
			}
			if ok {
				s.ip = ip
			}
		}
	}
	if s.ip != nil {
		pieces := 2 * (lt - lf) * ((tt-1)/s.ip.pageTokens - tf/s.ip.pageTokens + 1)
		vec := s.ip.appendPieces(make([][]byte, 0, pieces), tf, tt, lf, lt, s.cfg.KVDim)
		f := &Frame{Type: TypeData, ID: s.cfg.ID, Seq: seq, TokFrom: uint32(tf), TokTo: uint32(tt),
			LayerFrom: uint16(lf), LayerTo: uint16(lt), vec: vec, vecLen: 4 * n, pin: s.ip.src}
		s.checksum(f, vec, tf, tt, lf, lt)
		return f, nil
	}
	// The payload comes from the frame buffer pool, unzeroed: the reads
	// below fill every byte of it. The edge gives it back when it sends
	// the frame (Send; bufpool.go).
	payload, ref := getBuf(4 * n)
	var data []float32
	if nativeLittleEndian {
		data = bytesAsFloats(payload) // read the KV straight into the frame
	} else {
		data = make([]float32, n)
	}
	for i, l := 0, lf; l < lt; i, l = i+1, l+1 {
		base := 2 * span * i
		if err := s.cfg.Source.ReadTokens(l, tf, tt, data[base:base+span], data[base+span:base+2*span]); err != nil {
			ref.put()
			return nil, errf(errkind.Internal, CodeWrite, "reading prefill KV tokens [%d, %d) layer %d: %v", tf, tt, l, err)
		}
	}
	f := &Frame{Type: TypeData, ID: s.cfg.ID, Seq: seq, TokFrom: uint32(tf), TokTo: uint32(tt),
		LayerFrom: uint16(lf), LayerTo: uint16(lt), Payload: payload, buf: ref}
	if nativeLittleEndian {
		s.checksum(f, [][]byte{payload}, tf, tt, lf, lt)
	}
	if s.corrupt != nil {
		s.corrupt(seq, data)
		f.crcFrom = crcNone // the CRC is of the damaged bytes, as a real bug's would be
	}
	if !nativeLittleEndian {
		PutFloats(payload, data)
	}
	return f, nil
}

// checksum reads frame f's payload (pieces, whose concatenation is the
// DATA payload over tokens [tf, tt) x layers [lf, lt), each piece a whole
// number of vectors) once, checksumming each K and V vector, and combines
// those checksums two ways: in payload order into the frame's wire CRC,
// and, the first time the frame is read, in token order into the
// digest's per-token checksums. Frames are first read in seq order, so a
// token's layers arrive in layer order and each token is complete once
// its last layer is in.
func (s *Sender) checksum(f *Frame, pieces [][]byte, tf, tt, lf, lt int) {
	kd, T, L := s.cfg.KVDim, tt-tf, lt-lf
	if s.sums == nil {
		s.sums = make([]byte, 4*s.cfg.Tokens)
		s.comb = combinerFor(4 * kd)
	}
	n := 2 * T * L // vectors, in payload order: layer, then K or V, then token
	if cap(s.blocks) < n {
		s.blocks = make([]uint32, n)
	}
	blocks := s.blocks[:n]
	if s.sealedBlocks(blocks, tf, tt, lf, lt) {
		s.keptSums++
	} else {
		s.readSums++
		i := 0
		for _, p := range pieces {
			i += crcVecs(blocks[i:], p, 4*kd)
		}
	}
	var hb [HeaderSize + DataHeaderSize]byte
	if head, err := f.appendHead(hb[:0], math.MaxInt); err == nil {
		crc := crc32.Checksum(head, castagnoli)
		for _, b := range blocks {
			crc = s.comb.combine(crc, b)
		}
		f.crc, f.crcFrom = crc, crcBuilt
	}
	if f.Seq != s.summed {
		return // a retransmission: its KV is in the digest already
	}
	s.summed++
	for i := range T {
		var crc uint32
		if lf > 0 {
			crc = s.tokCRC
		}
		for j := range L {
			crc = s.comb.combine(crc, blocks[2*j*T+i])     // K
			crc = s.comb.combine(crc, blocks[(2*j+1)*T+i]) // V
		}
		if lt == s.cfg.Layers {
			binary.LittleEndian.PutUint32(s.sums[4*(tf+i):], crc)
		} else {
			s.tokCRC = crc
		}
	}
}

// ChecksumSources counts the DATA frames built so far (retransmissions
// included) by where their checksums came from: kept by the Source since
// the KV was written, or read from the KV here. For the metrics of a
// prefill server, whose pool keeps them: read frames mean the fast path
// is not in use.
func (s *Sender) ChecksumSources() (kept, read int) { return s.keptSums, s.readSums }

// cellSummer is a Source that kept the checksum of each K and V vector
// from when it was written (kv.Lease over a pool with Checksums).
type cellSummer interface {
	Sums(layer, from, to int, k, v []uint32) bool
}

// sealedBlocks fills blocks, in payload order, with the checksums the
// Source kept, if it kept them for every vector of the frame. The frame
// then goes out without its payload being read here at all; decode still
// checks the CRC against the bytes that arrive, so a checksum that no
// longer matches its vector fails the transfer (kv's sums.go).
func (s *Sender) sealedBlocks(blocks []uint32, tf, tt, lf, lt int) bool {
	sm, ok := s.cfg.Source.(cellSummer)
	if !ok || s.corrupt != nil {
		return false
	}
	T := tt - tf
	for j := range lt - lf {
		k, v := blocks[2*j*T:(2*j+1)*T], blocks[(2*j+1)*T:(2*j+2)*T]
		if !sm.Sums(lf+j, tf, tt, k, v) {
			return false
		}
	}
	return true
}

func (s *Sender) openFrame() *Frame {
	return &Frame{Type: TypeOpen, ID: s.cfg.ID, Tenant: s.cfg.Tenant, Tokens: uint32(s.cfg.Tokens),
		Layers: uint16(s.cfg.Layers), KVDim: uint32(s.cfg.KVDim), Window: uint32(s.window)}
}

func (s *Sender) send(f *Frame) Action { return SendFrame{Frame: f} }

// fail ends the transfer: Fail, an ABORT to decode when abort is set (the
// failure was seen here, not reported by decode), and Release. Release may
// follow at once: the edge sends the DATA frames this Step handed it,
// which may alias the pages, before it carries out the Release (rule 3 in
// alias.go), and this Sender builds no frame after it.
func (s *Sender) fail(out []Action, err *errkind.Error, abort bool) []Action {
	s.state, s.err = sFailed, err
	out = append(out, Fail{ID: s.cfg.ID, Err: err})
	if abort {
		out = append(out, s.send(abortFrame(s.cfg.ID, err)))
	}
	if !s.released {
		s.released, s.ip = true, nil
		out = append(out, Release{ID: s.cfg.ID})
	}
	return out
}

// String summarises the sender for logs.
func (s *Sender) String() string {
	return fmt.Sprintf("sender %v: %v, %d/%d frames sent, %d credited", s.cfg.ID, s.state, s.next, s.frames, s.credit)
}
