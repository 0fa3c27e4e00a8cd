// Package engine runs many tenants' requests on one model: admission,
// first-come-first-served scheduling, continuous batching with chunked
// prefill, preemption by recompute, cancellation, and the per-tenant
// limits that keep one tenant from starving the others.
//
// It owns the request lifecycle. One goroutine (Run) owns all scheduling
// state; Submit and the cancellation hooks reach it through channels. The
// scheduling decisions themselves (what runs in the next step, who is
// preempted) are made by code that does no I/O and reads no clock, so they
// are testable step by step.
//
// It must never: start a request that did not pass Admit; substitute
// anything for a prompt; report a failure as a finish reason; reorder
// requests across tenants by prefix-cache match; or let a request read KV
// pages it does not own (the kv package enforces the tags, the engine fails
// the request when a check trips).
package engine
