package transfer

import (
	"context"
	"fmt"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/config"
	"github.com/bulkhead-llm/bulkhead/internal/kv"
)

// The benchmarks below move the KV of one 512-token prompt of the 110M
// shape, in its geometry (12 layers × 768 floats × K and V: 37.7 MB), over
// loopback TCP: once through the full protocol (frames, CRC32C on every
// frame, credit window, coverage tracking, writes into kv pages, the
// digest of the pages checked at commit, acknowledgement), and once as raw
// bytes through the same kind of socket. The prefill pool keeps its
// vectors' checksums, as a prefill server's does (kv.PoolConfig.Checksums:
// taken when the KV is written, before the timer starts here and during
// the forward pass there), so the sender combines them instead of reading
// the KV; decode checks every frame's CRC against the bytes that arrive,
// as always. The ratio the docs quote comes
// from BenchmarkTransferVsRaw, which runs the two back to back in every
// iteration so that the machine's drift falls on both alike:
//
//	go test -run '^$' -bench TransferVsRaw -benchtime 20x -count 3 ./internal/transfer/
//
// Both use the production defaults (internal/config): frames of
// DefaultFrameBytes, DefaultWindow of them in flight; the raw reference
// writes chunks of 128 KiB to 1 MiB and reads readPiece-sized ones, the
// size the TCP transport reads.
const (
	benchTokens = 512
	benchLayers = 12
	benchKVDim  = 768
	benchBytes  = benchTokens * benchLayers * benchKVDim * 2 * 4
	benchFrame  = config.DefaultFrameBytes
	benchWindow = config.DefaultWindow
)

func BenchmarkTransferLoopback(b *testing.B) {
	rig := newTransferRig(b)
	defer rig.close()
	b.SetBytes(benchBytes)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rig.once(b)
	}
}

// transferRig moves one prompt's KV through the whole protocol over
// loopback TCP, from a prefill pool to a decode pool, once per call.
type transferRig struct {
	ln           net.Listener
	pPool, dPool *kv.Pool
	src          *kv.Seq
	n            uint64
}

func newTransferRig(b *testing.B) *transferRig {
	cfg := kv.PoolConfig{Pages: 2 * benchTokens / 16, PageSize: 16, Layers: benchLayers, KVDim: benchKVDim, Scrub: kv.ScrubZero}
	dPool, _ := kv.NewPool(cfg)
	cfg.Checksums = true // as a prefill server's pool: the KV's checksums are taken as it is written
	pPool, _ := kv.NewPool(cfg)
	src, _ := pPool.Alloc(kv.Owner{Tenant: "a", Request: 1}, benchTokens)
	buf := make([]float32, benchTokens*benchKVDim)
	for i := range buf {
		buf[i] = float32(i)
	}
	for l := 0; l < benchLayers; l++ {
		src.WriteTokens(l, 0, benchTokens, buf, buf)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	return &transferRig{ln: ln, pPool: pPool, dPool: dPool, src: src, n: 1}
}

func (r *transferRig) close() { r.ln.Close() }

// once runs one transfer and returns how long it took, from the
// reservation to both sides' end (decode verified and acknowledged,
// prefill saw the acknowledgement). Neither that figure nor the
// benchmark timer includes scrubbing the received pages afterwards: that
// happens when the decode request ends, not during its transfer.
func (r *transferRig) once(b *testing.B) time.Duration {
	start := time.Now()
	r.n++
	lease, _ := r.src.Lease()
	id := NewID()
	dst, err := r.dPool.Alloc(kv.Owner{Tenant: "a", Request: r.n}, benchTokens+1)
	if err != nil {
		b.Fatal(err)
	}
	tbl := NewTable(TableConfig{})
	if err := tbl.Reserve(Reservation{ID: id, Tenant: "a", Tokens: benchTokens, MaxNew: 1, Layers: benchLayers, KVDim: benchKVDim,
		Deadline: 30 * time.Second, Window: benchWindow, MaxFrameBytes: benchFrame}); err != nil {
		b.Fatal(err)
	}
	s, err := NewSender(SenderConfig{ID: id, Tenant: "a", Tokens: benchTokens, Layers: benchLayers, KVDim: benchKVDim, Source: lease,
		MaxFrameBytes: benchFrame, Window: benchWindow, Lease: 30 * time.Second, Retry: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	got := make(chan edgeResult, 1)
	go func() {
		nc, err := r.ln.Accept()
		if err != nil {
			got <- edgeResult{err: err}
			return
		}
		c := NewTCPConn(nc, TCPOptions{})
		defer c.Close()
		got <- runReceiverEdge(ctx, c, tbl, dst, benchLayers, benchKVDim)
	}()
	nc, err := net.Dial("tcp", r.ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	c := NewTCPConn(nc, TCPOptions{})
	pres := runSenderEdge(ctx, c, s, func() { lease.Release() })
	dres := <-got
	c.Close()
	if !pres.done || !dres.ready {
		b.Fatalf("transfer failed: prefill %v, decode %v", pres.err, dres.err)
	}
	took := time.Since(start)
	b.StopTimer()
	dst.Free()
	b.StartTimer()
	return took
}

// BenchmarkRawTCPLoopback is the reference: the same 37.7 MB moved from
// one buffer in memory to another through the same kind of socket
// (net.Dial/Accept defaults, as the transport gets them), with nothing
// checked, in writes of 128 KiB to 1 MiB (the transport writes a frame,
// benchFrame, at a time) and reads of readPiece. The ratio to quote is
// against the fastest of them. Like the KV it stands for, the data starts
// in memory and must land in memory: a reference that resent one
// cache-hot chunk and read into one would measure the socket alone, not
// moving the bytes. (io.Copy into io.Discard would read 8 KiB at a time, a
// slower reference than this.)
func BenchmarkRawTCPLoopback(b *testing.B) {
	for _, w := range []int{128 << 10, 256 << 10, 512 << 10, 1 << 20} {
		b.Run(fmt.Sprintf("write=%dKiB", w>>10), func(b *testing.B) { rawLoopback(b, w, readPiece) })
	}
}

func rawLoopback(b *testing.B, wchunk, rchunk int) {
	rig := newRawRig(b)
	defer rig.close()
	b.SetBytes(benchBytes)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rig.once(b, wchunk, rchunk)
	}
}

// rawRig moves benchBytes from one buffer to another through a fresh
// loopback TCP connection per call, nothing checked.
type rawRig struct {
	ln       net.Listener
	src, dst []byte
}

func newRawRig(b *testing.B) *rawRig {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	src := make([]byte, benchBytes)
	dst := make([]byte, benchBytes)
	for i := range src {
		src[i] = byte(i)
	}
	clear(dst) // touch every page before timing, as the KV pools are
	return &rawRig{ln: ln, src: src, dst: dst}
}

func (r *rawRig) close() { r.ln.Close() }

func (r *rawRig) once(b *testing.B, wchunk, rchunk int) {
	done := make(chan int, 1)
	go func() {
		nc, err := r.ln.Accept()
		if err != nil {
			done <- -1
			return
		}
		defer nc.Close()
		n := 0
		for n < len(r.dst) {
			m, err := nc.Read(r.dst[n:min(len(r.dst), n+rchunk)])
			n += m
			if err != nil {
				break
			}
		}
		done <- n
	}()
	nc, err := net.Dial("tcp", r.ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	for sent := 0; sent < benchBytes; sent += wchunk {
		if _, err := nc.Write(r.src[sent:min(benchBytes, sent+wchunk)]); err != nil {
			b.Fatal(err)
		}
	}
	nc.Close()
	if n := <-done; n != benchBytes {
		b.Fatalf("received %d of %d bytes", n, benchBytes)
	}
}

// BenchmarkTransferVsRaw measures the ratio the docs quote with the
// machine's drift taken out: every iteration runs one transfer and one raw
// move at each write size, back to back, so slow and fast minutes fall on
// both alike. It reports the median MB/s of the transfer and of the raw
// write size whose median is fastest, and their ratio:
//
//	go test -run '^$' -bench TransferVsRaw -benchtime 30x ./internal/transfer/
func BenchmarkTransferVsRaw(b *testing.B) {
	sizes := []int{128 << 10, 256 << 10, 512 << 10, 1 << 20}
	tr := newTransferRig(b)
	defer tr.close()
	raw := newRawRig(b)
	defer raw.close()
	var tt []float64
	rt := make([][]float64, len(sizes))
	timed := func(f func()) float64 {
		start := time.Now()
		f()
		return time.Since(start).Seconds()
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tt = append(tt, tr.once(b).Seconds())
		for j, w := range sizes {
			rt[j] = append(rt[j], timed(func() { raw.once(b, w, readPiece) }))
		}
	}
	b.StopTimer()
	mbs := func(secs []float64) float64 {
		slices.Sort(secs)
		return benchBytes / secs[len(secs)/2] / 1e6
	}
	t := mbs(tt)
	best, bestW := 0.0, 0
	for j, w := range sizes {
		if m := mbs(rt[j]); m > best {
			best, bestW = m, w
		}
	}
	b.ReportMetric(t, "transfer-MB/s")
	b.ReportMetric(best, "raw-MB/s")
	b.ReportMetric(float64(bestW>>10), "raw-write-KiB")
	b.ReportMetric(t/best, "ratio")
}
