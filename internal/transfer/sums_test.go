package transfer

import (
	"bytes"
	"errors"
	"testing"

	"github.com/bulkhead-llm/bulkhead/internal/kv"
)

// TestSenderKeptSums checks the Sender over a pool that keeps each
// vector's checksum from when it was written (kv.PoolConfig.Checksums):
// it builds byte for byte, CRC included, the frames a Sender builds by
// reading the pages; and it really does not read them. A vector changed
// behind the pool's back goes out under the checksum of what was written,
// so decode refuses the frame: with kept checksums the wire check covers
// the KV from the moment it was written, not from the send. Without them
// the same change goes through, checksummed as it is read.
func TestSenderKeptSums(t *testing.T) {
	const n, layers, kvdim = 11, 3, 64
	for _, maxFrame := range []int{1100, 1 << 16} {
		for _, keep := range []bool{true, false} {
			cfg := kv.PoolConfig{Pages: 64, PageSize: 4, Layers: layers, KVDim: kvdim, Checksums: keep}
			_, seq := filledSeqIn(t, cfg, n, 5)
			lease, err := seq.Lease()
			if err != nil {
				t.Fatal(err)
			}
			kept := senderFrames(t, lease, n, layers, kvdim, maxFrame)
			read := senderFrames(t, readerOnly{lease}, n, layers, kvdim, maxFrame)
			for i, f := range kept {
				a, err := f.Encode(nil, maxFrame)
				b, err2 := read[i].Encode(nil, maxFrame)
				if err != nil || err2 != nil || !bytes.Equal(a, b) || f.crc != read[i].crc {
					t.Fatalf("checksums kept %v, frame limit %d: DATA %d differs from the one built by reading (%v, %v)", keep, maxFrame, f.Seq, err, err2)
				}
			}

			// Change one float of layer 1 in place, as a stray write would.
			spans, err := lease.Spans(nil, 1, n)
			if err != nil {
				t.Fatal(err)
			}
			spans[0].K[3]++
			var refused error
			for _, f := range senderFrames(t, lease, n, layers, kvdim, maxFrame) {
				b, err := f.Encode(nil, maxFrame)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := Decode(b, maxFrame); err != nil {
					refused = err
				}
			}
			switch {
			case keep && !errors.Is(refused, ErrChecksum):
				t.Fatalf("frame limit %d: a vector changed after it was written went out under a checksum that matched (decode: %v)", maxFrame, refused)
			case !keep && refused != nil:
				t.Fatalf("frame limit %d: without kept checksums the frames should decode: %v", maxFrame, refused)
			}
			lease.Release()
			seq.Free()
		}
	}
}
