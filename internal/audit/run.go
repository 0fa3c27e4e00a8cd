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

// Options bound a run.
type Options struct {
	// Concurrency is how many mixed requests are in flight at once.
	Concurrency int
	// Timeout is each request's deadline, to the end of its body.
	Timeout time.Duration
	// Progress, when set, is called after each request with the number
	// done and the total. It is called from one goroutine at a time.
	Progress func(done, total int)
}

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
// then the Mixed ones with o.Concurrency in flight. It returns one Result
// per request, in plan order. It stops early, returning the results so far
// (the rest marked not sent) and an error, when a solo probe does not
// complete (a *BaselineError) or ctx ends. Every goroutine it starts has
// ended when it returns.
func Run(ctx context.Context, p *Plan, c Client, o Options) ([]Result, error) {
	if o.Concurrency < 1 {
		o.Concurrency = 1
	}
	if o.Timeout <= 0 {
		o.Timeout = time.Minute
	}
	results := make([]Result, len(p.Requests))
	for i := range results {
		results[i] = Result{ID: i, Transport: "not sent"}
	}
	var mu sync.Mutex // guards done and serialises Progress
	done := 0
	send := func(i int) {
		q := &p.Requests[i]
		rctx, cancel := context.WithTimeout(ctx, o.Timeout)
		resp := c.Send(rctx, q.Tenant, q.Endpoint, q.Body(p.Config.Model))
		if errors.Is(rctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil && resp.Err != "" {
			resp.Err = fmt.Sprintf("no complete response within the %v timeout (%s)", o.Timeout, resp.Err)
		}
		cancel()
		results[i] = Parse(q, resp)
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
