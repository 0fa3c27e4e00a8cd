// Package loadgen drives load against an OpenAI-compatible HTTP endpoint
// and measures what a client sees: time to first token, gaps between
// streamed tokens, end-to-end latency, throughput, and which requests
// failed and how.
//
// It owns the load loop (a closed loop of a fixed number of workers per
// concurrency level), the streaming client (raw net/http with its own
// server-sent-events parser, so that every chunk is timed as it arrives),
// the checks that decide whether a response counts as a success, and the
// statistics over the results.
//
// It must never send load anywhere but a loopback address unless the
// caller says so explicitly (Config.AllowRemote): the check runs on the
// URL before anything is sent and again on every address actually dialled,
// so neither a name that resolves elsewhere nor a redirect can get around
// it. Every run is bounded: a fixed number of requests per level, each
// with its own deadline. It never prints: progress and results go to
// callbacks and the returned Report, and the caller decides how to show
// them. It never logs or returns the API key.
package loadgen
