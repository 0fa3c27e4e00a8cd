// Package api is Bulkhead's OpenAI-compatible HTTP API: /v1/models,
// /v1/completions and /v1/chat/completions (with SSE streaming), plus
// /health, /ready and /metrics.
//
// It owns the HTTP edge: decoding and validating request bodies, API-key
// authentication and the mapping from key to tenant, chat rendering and
// tokenization, admission (engine.Admit) before anything is submitted,
// stop sequences, the response and SSE formats, and the one function that
// maps an error kind to an HTTP status (statusOf). docs/api.md describes
// the wire behaviour.
//
// It must never:
//   - log or echo a prompt, an output or an API key (logs carry sizes,
//     tenants, statuses and durations only);
//   - take a tenant from the request body: the tenant comes from the key;
//   - submit a request that admission rejected, or substitute anything for
//     a prompt that is too long;
//   - show a log probability the engine did not give: a token without
//     one, when they were asked for, fails the request;
//   - answer 200 for a failed generation, or end a failed stream with a
//     finish_reason or [DONE]: a client must never mistake a failure for
//     a success.
package api
