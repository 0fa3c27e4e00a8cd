package api

import (
	"context"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/bulkhead-llm/bulkhead/internal/config"
	"github.com/bulkhead-llm/bulkhead/internal/embedded"
	"github.com/bulkhead-llm/bulkhead/internal/engine"
	"github.com/bulkhead-llm/bulkhead/internal/errkind"
	"github.com/bulkhead-llm/bulkhead/internal/metrics"
	"github.com/bulkhead-llm/bulkhead/internal/sample"
	"github.com/bulkhead-llm/bulkhead/internal/tokenizer"
)

// fakeBackend is a Backend that generates the tokens of a fixed reply (the
// same for every prompt unless reply is set), and can be told to fail.
type fakeBackend struct {
	tok    *tokenizer.Tokenizer
	limits engine.Limits

	mu        sync.Mutex
	submitted []engine.Request
	cancelled int

	reply      func(prompt []int) string // default: defaultReply
	submitErr  error                     // Submit fails with this
	submitHold chan struct{}             // non-nil: Submit waits for ctx to end, refuses, then closes it
	failAfter  int                       // > 0: after this many tokens, end with failErr
	failErr    *errkind.Error
	lieAboutPN int           // > 0: report this many prompt tokens instead of the truth
	delay      time.Duration // between tokens (default 20µs)
	// lpHole > 0: for a request that asked for log probabilities, the
	// token at this 1-based position comes without them.
	lpHole int
}

// fakeLogprobs is what the fake reports for the n-th (0-based) token t
// of a reply: t with log probability -(n+1)/100, and top alternatives
// t+1, t+2, ... (mod vocab) at -1, -2, ...: most likely first, as the
// engine orders them. The alternatives leave t out, so that tests can
// tell the sampled token's entry from theirs.
func fakeLogprobs(t, n, top, vocab int) *sample.Logprobs {
	lp := &sample.Logprobs{Token: t, Logprob: -float32(n+1) / 100}
	for k := range top {
		lp.Top = append(lp.Top, sample.TokenLogprob{Token: (t + 1 + k) % vocab, Logprob: -float32(k + 1)})
	}
	return lp
}

const defaultReply = " Once upon a time, there was a little cat. The cat was happy."

func (f *fakeBackend) Limits() engine.Limits { return f.limits }

func (f *fakeBackend) Submit(ctx context.Context, a engine.Admitted) (*engine.Stream, error) {
	if !a.Valid() {
		panic("Submit called with an Admitted that did not come from Admit")
	}
	req := a.Request()
	f.mu.Lock()
	f.submitted = append(f.submitted, req)
	f.mu.Unlock()
	if f.submitHold != nil {
		// As the engine does for a caller already gone: refuse.
		<-ctx.Done()
		defer close(f.submitHold)
		return nil, errkind.New(errkind.Unavailable, "request_cancelled", "the request was cancelled")
	}
	if f.submitErr != nil {
		return nil, f.submitErr
	}
	text := defaultReply
	if f.reply != nil {
		text = f.reply(req.Prompt)
	}
	out := f.tok.Encode(text, false)
	st := engine.NewStream()
	go func() {
		pn := len(req.Prompt)
		if f.lieAboutPN > 0 {
			pn = f.lieAboutPN
		}
		n := 0
		for _, t := range out {
			if ctx.Err() != nil {
				f.mu.Lock()
				f.cancelled++
				f.mu.Unlock()
				st.Close(engine.Result{Err: errkind.Wrap(errkind.Internal, "cancelled", ctx.Err(), "request cancelled"), Usage: engine.Usage{PromptTokens: pn, CompletionTokens: n}})
				return
			}
			if f.failAfter > 0 && n == f.failAfter {
				st.Close(engine.Result{Err: f.failErr, Usage: engine.Usage{PromptTokens: pn, CompletionTokens: n}})
				return
			}
			if n == req.MaxTokens {
				st.Close(engine.Result{Finish: engine.FinishLength, Usage: engine.Usage{PromptTokens: pn, CompletionTokens: n}})
				return
			}
			if req.Sampling.Logprobs {
				var lp *sample.Logprobs
				if n+1 != f.lpHole {
					lp = fakeLogprobs(t, n, req.Sampling.TopLogprobs, f.tok.VocabSize())
				}
				st.PushWith([]int{t}, []*sample.Logprobs{lp})
			} else {
				st.Push(t)
			}
			n++
			time.Sleep(max(f.delay, 20*time.Microsecond)) // let the consumer see tokens one by one
			if t == f.tok.EOS() {
				break
			}
		}
		st.Close(engine.Result{Finish: engine.FinishStop, Usage: engine.Usage{PromptTokens: pn, CompletionTokens: n}})
	}()
	return st, nil
}

func (f *fakeBackend) calls() []engine.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]engine.Request(nil), f.submitted...)
}

var (
	tokOnce sync.Once
	tok512  *tokenizer.Tokenizer
)

func testTokenizer(t testing.TB) *tokenizer.Tokenizer {
	tokOnce.Do(func() {
		var err error
		tok512, err = tokenizer.FromLlama2C(embedded.Tokenizer, 512)
		if err != nil {
			panic(err)
		}
	})
	return tok512
}

const (
	keyA = "sk-tenant-a-0123456789"
	keyB = "sk-tenant-b-9876543210"
)

type harness struct {
	fake    *fakeBackend
	srv     *Server
	http    *httptest.Server
	metrics *metrics.Metrics
}

// newHarness starts a Server over a fake backend with two tenants, a and b.
func newHarness(t *testing.T, mod func(*Options, *fakeBackend)) *harness {
	t.Helper()
	tok := testTokenizer(t)
	fake := &fakeBackend{tok: tok, limits: engine.Limits{ContextLen: 64, MaxInputTokens: 48, PoolTokens: 256}}
	m := metrics.New()
	opts := Options{
		Backend: fake, Tokenizer: tok, ModelName: embedded.Name, Metrics: m,
		Tenants:      []config.Tenant{{Name: "a", APIKeys: []string{keyA}}, {Name: "b", APIKeys: []string{keyB}}},
		MaxBodyBytes: 4096,
	}
	if mod != nil {
		mod(&opts, fake)
	}
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{fake: fake, srv: s, http: httptest.NewServer(s), metrics: m}
	t.Cleanup(h.http.Close)
	return h
}

func (h *harness) client(key string) *openai.Client {
	opts := []option.RequestOption{option.WithBaseURL(h.http.URL + "/v1/"), option.WithMaxRetries(0)}
	if key != "" {
		opts = append(opts, option.WithAPIKey(key))
	}
	c := openai.NewClient(opts...)
	return &c
}
