package router

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/engine"
	"github.com/bulkhead-llm/bulkhead/internal/peerapi"
	"github.com/bulkhead-llm/bulkhead/internal/sample"
)

// connCount is the key of a connection's request counter in a request's
// context (http.Server.ConnContext).
type connCount struct{}

// closesKeptAlive wraps h so that a request on paths that arrives on a
// connection which already carried one is read and then dropped without
// an answer: the server closed its kept-alive connection (it restarted at
// the same address) just as the router wrote the call on it. A request
// on a fresh connection is served. It counts the dropped requests in
// dropped.
func closesKeptAlive(h http.Handler, dropped *atomic.Int32, paths ...string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := r.Context().Value(connCount{}).(*atomic.Int32).Add(1)
		drop := false
		for _, p := range paths {
			drop = drop || (r.URL.Path == p && n > 1)
		}
		if !drop {
			h.ServeHTTP(w, r)
			return
		}
		io.Copy(io.Discard, r.Body)
		c, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			panic(err)
		}
		dropped.Add(1)
		c.Close()
	})
}

// keyRecorder wraps h to note the idempotency key of each request, by path.
type keyRecorder struct {
	mu   sync.Mutex
	keys map[string][]string
}

func (k *keyRecorder) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k.mu.Lock()
		k.keys[r.URL.Path] = append(k.keys[r.URL.Path], r.Header.Get(peerapi.HeaderIdempotencyKey))
		k.mu.Unlock()
		h.ServeHTTP(w, r)
	})
}

func (k *keyRecorder) of(path string) []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]string(nil), k.keys[path]...)
}

// serveCounting serves h with a request counter per connection.
func serveCounting(t *testing.T, h http.Handler) *httptest.Server {
	s := httptest.NewUnstartedServer(h)
	s.Config.ConnContext = func(ctx context.Context, _ net.Conn) context.Context {
		return context.WithValue(ctx, connCount{}, new(atomic.Int32))
	}
	s.Start()
	t.Cleanup(s.Close)
	return s
}

// TestPrefillReplayedAfterKeptAliveClose: a PREFILL written on the kept-
// alive connection of a prefill server that closed it (a restart at the
// same address, which the router's transport had not read yet) before
// answering is sent again on a fresh connection, and the request
// succeeds, instead of failing with a 502. Every call that a peer may
// receive twice carries the transfer id as its idempotency key; the
// reservation does not (its copy would be refused as a replayed id).
// The rig is deterministic: the handshake leaves one idle connection,
// health checks are off, and the prefill server drops the PREFILL that
// arrives on it.
func TestPrefillReplayedAfterKeptAliveClose(t *testing.T) {
	f := newFake()
	var dropped atomic.Int32
	keys := &keyRecorder{keys: map[string][]string{}}
	pre := serveCounting(t, keys.wrap(closesKeptAlive(f.handler(RolePrefill, 0), &dropped, peerapi.PathPrefill)))
	dec := serveCounting(t, keys.wrap(f.handler(RoleDecode, 0)))
	client := &http.Client{Transport: &http.Transport{}} // its own pool: nothing else shares the kept connection
	r, err := New(context.Background(), Options{Prefill: []string{addr(pre)}, Decode: []string{addr(dec)}, Client: client,
		HealthEvery: time.Hour, StartWait: time.Second, CancelGiveUp: 2 * time.Second, TransferTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	st, err := r.Submit(context.Background(), admitted(t, "acme", 7, 3))
	if err != nil {
		t.Fatalf("Submit: %v; a PREFILL on a kept-alive connection the server closed must be sent again on a fresh one", err)
	}
	if _, res := drain(t, st); res.Err != nil {
		t.Fatal(res.Err)
	}
	if dropped.Load() != 1 {
		t.Fatalf("the server dropped %d PREFILLs on a kept-alive connection; the rig must drop exactly the first", dropped.Load())
	}
	id := f.generates[0].ID
	if calls := f.prefillCalls(); len(calls) != 1 || calls[0] != id {
		t.Fatalf("prefill served %v; want the reservation %s once", calls, id)
	}
	if k := keys.of(peerapi.PathPrefill); len(k) != 2 || k[0] != id || k[1] != id {
		t.Fatalf("PREFILL idempotency keys %q; want the transfer id %s on both copies", k, id)
	}
	if k := keys.of(peerapi.PathGenerate); len(k) != 1 || k[0] != "" {
		t.Fatalf("generate idempotency keys %q; a reservation must not be replayable", k)
	}
	if c := f.cancelled(RoleDecode); len(c) != 0 {
		t.Fatalf("decode cancels %v for a request that succeeded", c)
	}

	// A cancel is replayable too (cancels are idempotent).
	if !r.cancel(r.decode[0], id) {
		t.Fatal("the cancel was not acknowledged")
	}
	if k := keys.of(peerapi.PathCancel); len(k) != 1 || k[0] != id {
		t.Fatalf("cancel idempotency keys %q; want the transfer id %s", k, id)
	}
}

// TestFakePrefillAnswersAsPrefillsrv: the fake prefill answers a failure
// after its admission as prefillsrv's handlePrefill does for every
// request it understood: HTTP 200 with the error in the PrefillResult
// (a 400 is only for a body that is not a PrefillRequest), so the router
// tests exercise the path production takes (callPrefill's result, with
// what the peer says it sent), not peerFailure's.
func TestFakePrefillAnswersAsPrefillsrv(t *testing.T) {
	f := newFake()
	f.prefillErr = &peerapi.Error{Kind: "unavailable", Code: "transfer_timeout", Message: "no acknowledgement from decode within 2s"}
	s := f.server(t, RolePrefill, 0)
	body := `{"id":"00000000000000000000000000000001","tenant":"acme","prompt":[1,2,3],"max_tokens":1,"decode_kv_addr":"127.0.0.1:1"}`
	resp, err := http.Post(s.URL+peerapi.PathPrefill, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var res peerapi.PrefillResult
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || res.OK || res.Error == nil || res.Error.Code != f.prefillErr.Code {
		t.Fatalf("HTTP %d %+v; prefillsrv answers 200 with the error in the result", resp.StatusCode, res)
	}
}

// TestFirstLogprobsComeFromPrefill: decode cannot know the first token's
// log probabilities (the prefill server drew it), so the router takes
// them from the prefill's answer, even when decode's tokens overtake that
// answer; decode's own entries follow as they are.
func TestFirstLogprobsComeFromPrefill(t *testing.T) {
	f := newFake()
	f.prefillAnswerDelay = 100 * time.Millisecond
	r, _ := f.start(t, 1, 1)
	a, rej := engine.Admit(engine.Request{Tenant: "acme", Prompt: []int{1, 2, 3, 4, 5, 6, 7}, MaxTokens: 3,
		Sampling: sample.Params{Logprobs: true, TopLogprobs: 1}}, r.Limits())
	if rej != nil {
		t.Fatal(rej)
	}
	st, err := r.Submit(context.Background(), a)
	if err != nil {
		t.Fatal(err)
	}
	var toks []int
	var lps []*sample.Logprobs
	for {
		tk, lp, res, err := st.NextWith(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		toks, lps = append(toks, tk...), append(lps, lp...)
		if res != nil {
			if res.Err != nil {
				t.Fatal(res.Err)
			}
			break
		}
	}
	if len(toks) != 3 || len(lps) != 3 {
		t.Fatalf("%d tokens, %d log probabilities", len(toks), len(lps))
	}
	for i, lp := range lps {
		if want := fakeLogprobs(toks[i]).Sample(); !reflect.DeepEqual(lp, want) {
			t.Fatalf("token %d (%d): %+v, want %+v", i, toks[i], lp, want)
		}
	}
}

// TestFirstLogprobsLostFailsTheRequest: when the prefill's answer, which
// carries the first token's log probabilities, fails after decode took
// the KV, or does not come in time, a request that asked for them fails
// with a clear error soon after, rather than stall or show a made-up
// figure.
func TestFirstLogprobsLostFailsTheRequest(t *testing.T) {
	old := firstLogprobsWait
	firstLogprobsWait = 200 * time.Millisecond
	defer func() { firstLogprobsWait = old }()
	for name, setup := range map[string]func(f *fakeCluster){
		"answer failed": func(f *fakeCluster) {
			f.prefillLost = &peerapi.Error{Kind: "unavailable", Code: "transfer_timeout", Message: "no acknowledgement"}
			f.prefillLostAfter = 50 * time.Millisecond
		},
		"answer late": func(f *fakeCluster) { f.prefillAnswerDelay = 2 * time.Second },
	} {
		f := newFake()
		setup(f)
		r, _ := f.start(t, 1, 1)
		a, rej := engine.Admit(engine.Request{Tenant: "acme", Prompt: []int{1, 2, 3, 4, 5, 6, 7}, MaxTokens: 3,
			Sampling: sample.Params{Logprobs: true}}, r.Limits())
		if rej != nil {
			t.Fatal(rej)
		}
		start := time.Now()
		st, err := r.Submit(context.Background(), a)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var res *engine.Result
		var toks []int
		for res == nil {
			var tk []int
			tk, _, res, err = st.NextWith(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			toks = append(toks, tk...)
		}
		if res.Err == nil || res.Err.Code != "logprobs_unavailable" || len(toks) != 0 || time.Since(start) > 1500*time.Millisecond {
			t.Fatalf("%s: %d tokens, %+v after %v; want logprobs_unavailable, no token, within the wait", name, len(toks), res, time.Since(start))
		}
	}
}
