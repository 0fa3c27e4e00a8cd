// Package errkind classifies failures so that each class maps to one HTTP
// status in exactly one place (package api), whatever layer the failure
// came from: admission, the engine, the KV pool or a peer.
//
// It owns the vocabulary of failure kinds. It must never carry another
// tenant's data or a secret in a message: messages go to clients verbatim.
package errkind

import (
	"errors"
	"fmt"
)

// Kind is a class of failure.
type Kind int

const (
	// Internal is a bug or an invariant violation; the default for
	// unclassified errors.
	Internal Kind = iota
	// BadInput is a request that can never succeed as sent (400).
	BadInput
	// Auth is a missing or unknown credential (401).
	Auth
	// Quota is a tenant over its own limits (429); other tenants are fine.
	Quota
	// Overload is the server as a whole out of capacity (503).
	Overload
	// Integrity is corrupted, incomplete or foreign data detected: a failed
	// checksum, a short KV transfer, an ownership-tag mismatch (500/502).
	Integrity
	// Unavailable is a peer that cannot be reached or died mid-request (502).
	Unavailable
	// NotFound is an unknown model or route (404).
	NotFound
)

var kindNames = [...]string{"internal", "bad_input", "auth", "quota", "overload", "integrity", "unavailable", "not_found"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// Error is a classified error. Code is the machine-readable OpenAI-style
// code ("context_length_exceeded", "invalid_api_key", ...); Message is
// safe to show the client.
type Error struct {
	Kind    Kind
	Code    string
	Message string
	// Param names the offending request field, when there is one.
	Param string
	Err   error // underlying cause, for logs; never shown to clients
}

func (e *Error) Error() string {
	if e.Err != nil {
		return e.Message + ": " + e.Err.Error()
	}
	return e.Message
}

func (e *Error) Unwrap() error { return e.Err }

// New returns an Error of kind k with a formatted client-safe message.
func New(k Kind, code, format string, args ...any) *Error {
	return &Error{Kind: k, Code: code, Message: fmt.Sprintf(format, args...)}
}

// Wrap classifies err, keeping it as the cause. The message shown to
// clients is msg, not err's text, which may hold internal detail.
func Wrap(k Kind, code string, err error, msg string) *Error {
	return &Error{Kind: k, Code: code, Message: msg, Err: err}
}

// Of returns the classification of err: the outermost *Error in its chain,
// or an Internal error when none was classified.
func Of(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Kind: Internal, Code: "internal_error", Message: "internal error", Err: err}
}
