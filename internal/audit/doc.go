// Package audit is a black-box leak audit of an OpenAI-compatible
// endpoint: the work behind `bulkhead audit`. It sends requests as several
// tenants, each with its own API key, and looks in what comes back for
// evidence that one tenant's data reached, or changed, another's:
//
//   - over-limit prompts must be refused, never answered (the placeholder
//     bug of DESIGN.md section 1);
//   - greedy probe prompts must give, under concurrent mixed traffic, the
//     same bytes they gave when run alone (solo equivalence), and the
//     probe that is the same for every tenant must, alone, give each of
//     them the same bytes;
//   - no tenant may receive any part of another tenant's canary marker;
//   - no error message may echo a prompt;
//   - no tenant's first request may report prefix-cache hits on a prefix
//     that only another tenant sent before.
//
// It is built as a pure core with I/O at the edge. NewPlan turns a Config
// (tenant names, seed, rounds) into every request to send, deterministically.
// Parse turns one raw Response into a Result, and Evaluate turns the Plan
// and its Results into a Report of checks with evidence; none of them
// touches the network, a clock or a goroutine. Run drives a Client
// (HTTPClient over net/http, or a fake in tests) through the plan: solo
// requests one at a time, then the mixed rounds with bounded concurrency,
// sending a request answered 429 or 503 again a few times; it waits for
// every goroutine it starts. Besides Run, only
// HTTPClient.ListModels (and Models) sends anything: to check each key
// first, and to learn the context length when the operator gave none.
//
// It holds the API keys only inside HTTPClient, which puts them in the
// Authorization header and removes them from anything the server sends
// back. It must never:
//   - log or print an API key: the Plan, Results and Report name tenants
//     by their NAME only;
//   - log or print a prompt: every prompt is the audit's own synthetic
//     text, and a report quotes one only where a response did (truncated
//     evidence of that response's fault), never of its own accord;
//   - follow a redirect, so a key is only ever sent to the target;
//   - count a request it could not complete as a pass: what could not be
//     compared is reported, and a check with nothing to judge says so;
//   - claim more than it observed: a black-box audit finds leaks, it
//     cannot prove their absence (docs/audit.md).
package audit
