package transfer

import (
	"fmt"

	"github.com/bulkhead-llm/bulkhead/internal/errkind"
)

// Error codes of transfer failures, as they appear in errkind.Error.Code
// and in ABORT frames.
const (
	CodeChecksum  = "transfer_checksum"        // Integrity: a frame failed its CRC32C
	CodeDigest    = "transfer_digest_mismatch" // Integrity: KV as written != sender's digest
	CodeCount     = "transfer_count_mismatch"  // Integrity: token count != reservation
	CodeCoverage  = "transfer_coverage"        // Integrity: a (token, layer) missing or covered twice
	CodeTenant    = "transfer_tenant_mismatch" // Integrity: stream opened for another tenant
	CodeTimeout   = "transfer_timeout"         // Unavailable: lease or deadline expired
	CodePeerLost  = "transfer_peer_lost"       // Unavailable: connection closed or failed
	CodeCancelled = "transfer_cancelled"       // Unavailable: explicit cancel
	CodeProtocol  = "transfer_protocol"        // BadInput: a message out of order or out of range
	CodeUnknownID = "transfer_unknown_id"      // BadInput: no reservation with this id
	CodeReplayed  = "transfer_replayed_id"     // BadInput: id already used
	CodeSender    = "transfer_wrong_sender"    // decode's logs only: a frame from a prefill the reservation does not name (the wire says CodeUnknownID)
	CodeTooLong   = "context_length_exceeded"  // BadInput: over the sender's token limit
	CodeWrite     = "transfer_write_failed"    // Internal: the KV pool refused a write
)

func errf(k errkind.Kind, code, format string, args ...any) *errkind.Error {
	return errkind.New(k, code, "kv transfer: "+format, args...)
}

// fromFrame rebuilds the error a peer reported in an ABORT, CANCEL or
// REFUSED frame. Kinds outside errkind's range become Internal.
func fromFrame(f *Frame, who string) *errkind.Error {
	k := errkind.Kind(f.Kind)
	if k > errkind.NotFound {
		k = errkind.Internal
	}
	code := f.Code
	if code == "" {
		code = "transfer_aborted"
	}
	return errkind.New(k, code, "%s", fmt.Sprintf("kv transfer aborted by %s: %s", who, f.Reason))
}

// abortFrame is the ABORT a machine sends for err.
func abortFrame(id ID, err *errkind.Error) *Frame {
	return &Frame{Type: TypeAbort, ID: id, Kind: uint8(err.Kind), Code: clip(err.Code), Reason: clip(err.Message)}
}

func clip(s string) string {
	if len(s) > MaxString {
		return s[:MaxString]
	}
	return s
}

// cancelReason is the failure a Cancel stands for: its reason, or a plain
// "transfer cancelled".
func cancelReason(reason *errkind.Error) *errkind.Error {
	if reason == nil {
		return errf(errkind.Unavailable, CodeCancelled, "transfer cancelled")
	}
	return reason
}
