package audit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Client sends one request body to an endpoint as a tenant and returns
// what came back. It must be safe for concurrent use. HTTPClient is the
// real one.
type Client interface {
	Send(ctx context.Context, tenant string, ep Endpoint, body []byte) Response
}

// Redactor is a Client that holds secrets (HTTPClient: the API keys). Run
// passes every string of every Result through Redact, after Parse has
// decoded the body: a key the server sent back JSON-escaped ("\/", "\u0073")
// is hidden from a search of the raw body, not from the decoded text.
type Redactor interface {
	Redact(s string) string
}

// Options bound a run.
type Options struct {
	// Concurrency is how many mixed requests are in flight at once.
	Concurrency int
	// Timeout is each request's deadline, to the end of its body.
	Timeout time.Duration
	// Progress, when set, is called after each request with the number
	// done and the total. It is called from one goroutine at a time.
	Progress func(done, total int)
	// RetryWait is the first wait before a request answered 429 or 503
	// is sent again, when the answer gives no Retry-After (0: 250ms). It
	// doubles with each try.
	RetryWait time.Duration
}

// Resending a busy answer: a rate limit, or an endpoint that sheds the
// audit's own concurrent load, is not what the checks judge.
const (
	// maxTries bounds how often one request is sent.
	maxTries = 4
	// maxRetryWait bounds one wait, whatever Retry-After asks for.
	maxRetryWait = 20 * time.Second
	// defaultRetryWait is the first wait when none is set.
	defaultRetryWait = 250 * time.Millisecond
)

// maxOverLimitInFlight bounds the over-limit requests in flight at once,
// whatever the concurrency: each builds its prompt and body when sent,
// some 40 MB at the top of the context range, and 64 of them at once
// would hold gigabytes on the auditor's side.
const maxOverLimitInFlight = 2

// busy reports an answer worth sending the request again for.
func busy(r *Response) bool { return r.Status == 429 || r.Status == 503 }

// BaselineError is returned by Run when a probe failed on its own, before
// any concurrency: there is nothing to compare the mixed traffic with, and
// the cause (usually a refused key) is not a leak.
type BaselineError struct {
	Request string // the request, described
	Tenant  string
	Result  Result
}

// Error says which tenant and request failed, how, and what to check.
func (e *BaselineError) Error() string {
	r := &e.Result
	switch {
	case r.Status == 401 || r.Status == 403:
		return fmt.Sprintf("the endpoint refused tenant %q's API key: %s answered %s; check --key %s=...",
			e.Tenant, e.Request, r.describe(), e.Tenant)
	case r.Status == 0:
		return fmt.Sprintf("tenant %q's solo baseline got no answer: %s: %s", e.Tenant, e.Request, r.Transport)
	default:
		return fmt.Sprintf("tenant %q's solo baseline failed, so there is nothing to compare against: %s answered %s",
			e.Tenant, e.Request, r.describe())
	}
}

// Run sends the plan through c: the Solo requests one at a time, in order,
// then the Mixed ones with o.Concurrency in flight. A request answered 429
// or 503 is sent again, up to maxTries times in all, after the answer's
// Retry-After or a doubling wait; the last answer is its result. Run
// returns one Result per request, in plan order. It stops early, returning
// the results so far (the rest marked not sent) and an error, when a solo
// probe does not complete (a *BaselineError) or ctx ends (an error that
// wraps ctx's). Every goroutine it starts has ended when it returns.
func Run(ctx context.Context, p *Plan, c Client, o Options) ([]Result, error) {
	if o.Concurrency < 1 {
		o.Concurrency = 1
	}
	if o.Timeout <= 0 {
		o.Timeout = time.Minute
	}
	if o.RetryWait <= 0 {
		o.RetryWait = defaultRetryWait
	}
	results := make([]Result, len(p.Requests))
	for i := range results {
		results[i] = Result{ID: i, Transport: "not sent"}
	}
	var mu sync.Mutex // guards done and serialises Progress
	done := 0
	overLimit := make(chan struct{}, maxOverLimitInFlight)
	send := func(i int) {
		q := &p.Requests[i]
		if q.Kind == OverLimit {
			select {
			case overLimit <- struct{}{}:
				defer func() { <-overLimit }()
			case <-ctx.Done():
				return // stopped: left "not sent", its prompt never built
			}
		}
		body := q.Body(p.Config.Model)
		var resp Response
		for try := 1; ; try++ {
			rctx, cancel := context.WithTimeout(ctx, o.Timeout)
			resp = c.Send(rctx, q.Tenant, q.Endpoint, body)
			if errors.Is(rctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil && resp.Err != "" {
				resp.Err = fmt.Sprintf("no complete response within the %v timeout (%s)", o.Timeout, resp.Err)
			}
			cancel()
			if !busy(&resp) || try == maxTries || !sleep(ctx, retryWait(o.RetryWait, try, resp.RetryAfter)) {
				break
			}
		}
		results[i] = Parse(q, resp)
		if rd, ok := c.(Redactor); ok {
			results[i].redact(rd.Redact)
		}
		mu.Lock()
		done++
		if o.Progress != nil {
			o.Progress(done, len(results))
		}
		mu.Unlock()
	}

	solo := p.SoloCount()
	for i := range solo {
		if err := ctx.Err(); err != nil {
			return results, fmt.Errorf("audit stopped during the solo requests: %w", err)
		}
		send(i)
		if err := ctx.Err(); err != nil {
			return results, fmt.Errorf("audit stopped during the solo requests: %w", err)
		}
		if q, r := &p.Requests[i], &results[i]; q.Kind == Probe && !r.Complete {
			return results, &BaselineError{Request: q.String(), Tenant: q.Tenant, Result: *r}
		}
	}

	next := make(chan int)
	var wg sync.WaitGroup
	for range min(o.Concurrency, len(p.Requests)-solo) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				send(i)
			}
		}()
	}
	var err error
feed:
	for i := solo; i < len(p.Requests); i++ {
		select {
		case next <- i:
		case <-ctx.Done():
			err = fmt.Errorf("audit stopped during the mixed traffic: %w", ctx.Err())
			break feed
		}
	}
	close(next)
	wg.Wait()
	return results, err
}

// retryWait is the wait before try+1: what the answer asked for, or first
// doubled try-1 times, at most maxRetryWait.
func retryWait(first time.Duration, try int, asked time.Duration) time.Duration {
	if asked > 0 {
		return min(asked, maxRetryWait)
	}
	return min(first<<(try-1), maxRetryWait)
}

// sleep waits d, or until ctx ends; it reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
