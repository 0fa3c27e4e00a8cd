package transfer

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/config"
	"github.com/bulkhead-llm/bulkhead/internal/kv"
)

// The benchmarks below move the KV of one 512-token prompt, 37.7 MB (the
// size of a 512-token prompt of the 110M shape: 12 layers × 768 floats ×
// K and V; here 3 layers × 3072 floats to keep the test fixtures' layer
// count), over loopback TCP: once through the full protocol (frames,
// CRC32C on every frame, credit window, coverage tracking, writes into
// kv pages, the digest of the pages checked at commit, acknowledgement),
// and once as raw bytes through the same kind of socket. Compare their
// MB/s:
//
//	go test -run '^$' -bench 'Loopback' -count 5 ./internal/transfer/ | benchstat -
//
// Both use the production defaults (internal/config): frames of
// DefaultFrameBytes, DefaultWindow of them in flight; the raw reference
// writes frame-sized chunks and reads readPiece-sized ones, the sizes the
// TCP transport writes and reads.
const (
	benchTokens = 512
	benchKVDim  = 3072
	benchBytes  = benchTokens * testLayers * benchKVDim * 2 * 4
	benchFrame  = config.DefaultFrameBytes
	benchWindow = config.DefaultWindow
)

func BenchmarkTransferLoopback(b *testing.B) {
	cfg := kv.PoolConfig{Pages: 2 * benchTokens / 16, PageSize: 16, Layers: testLayers, KVDim: benchKVDim, Scrub: kv.ScrubZero}
	pPool, _ := kv.NewPool(cfg)
	dPool, _ := kv.NewPool(cfg)
	src, _ := pPool.Alloc(kv.Owner{Tenant: "a", Request: 1}, benchTokens)
	buf := make([]float32, benchTokens*benchKVDim)
	for i := range buf {
		buf[i] = float32(i)
	}
	for l := 0; l < testLayers; l++ {
		src.WriteTokens(l, 0, benchTokens, buf, buf)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	b.SetBytes(benchBytes)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		lease, _ := src.Lease()
		id := NewID()
		dst, err := dPool.Alloc(kv.Owner{Tenant: "a", Request: uint64(i + 2)}, benchTokens+1)
		if err != nil {
			b.Fatal(err)
		}
		tbl := NewTable(TableConfig{})
		if err := tbl.Reserve(Reservation{ID: id, Tenant: "a", Tokens: benchTokens, MaxNew: 1, Layers: testLayers, KVDim: benchKVDim,
			Deadline: 30 * time.Second, Window: benchWindow, MaxFrameBytes: benchFrame}); err != nil {
			b.Fatal(err)
		}
		s, err := NewSender(SenderConfig{ID: id, Tenant: "a", Tokens: benchTokens, Layers: testLayers, KVDim: benchKVDim, Source: lease,
			MaxFrameBytes: benchFrame, Window: benchWindow, Lease: 30 * time.Second, Retry: time.Second})
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		got := make(chan edgeResult, 1)
		go func() {
			nc, err := ln.Accept()
			if err != nil {
				got <- edgeResult{err: err}
				return
			}
			c := NewTCPConn(nc, TCPOptions{})
			defer c.Close()
			got <- runReceiverEdge(ctx, c, tbl, dst, benchKVDim)
		}()
		nc, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		c := NewTCPConn(nc, TCPOptions{})
		pres := runSenderEdge(ctx, c, s, func() { lease.Release() })
		dres := <-got
		c.Close()
		cancel()
		if !pres.done || !dres.ready {
			b.Fatalf("transfer failed: prefill %v, decode %v", pres.err, dres.err)
		}
		b.StopTimer() // scrubbing the pages is the decode request's cost, not the transfer's
		dst.Free()
		b.StartTimer()
	}
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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	src := make([]byte, benchBytes)
	dst := make([]byte, benchBytes)
	for i := range src {
		src[i] = byte(i)
	}
	clear(dst) // touch every page before timing, as the KV pools are
	b.SetBytes(benchBytes)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		done := make(chan int, 1)
		go func() {
			nc, err := ln.Accept()
			if err != nil {
				done <- -1
				return
			}
			defer nc.Close()
			n := 0
			for n < len(dst) {
				m, err := nc.Read(dst[n:min(len(dst), n+rchunk)])
				n += m
				if err != nil {
					break
				}
			}
			done <- n
		}()
		nc, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		for sent := 0; sent < benchBytes; sent += wchunk {
			if _, err := nc.Write(src[sent:min(benchBytes, sent+wchunk)]); err != nil {
				b.Fatal(err)
			}
		}
		nc.Close()
		if n := <-done; n != benchBytes {
			b.Fatalf("received %d of %d bytes", n, benchBytes)
		}
	}
}
