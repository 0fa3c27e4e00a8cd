package decodesrv_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/config"
	"github.com/bulkhead-llm/bulkhead/internal/peerapi"
	"github.com/bulkhead-llm/bulkhead/internal/sample"
	"github.com/bulkhead-llm/bulkhead/internal/transfer"
)

// TestDisaggregatedEqualsSolo: prefill on one server, KV over mutual TLS,
// decode on another; the text equals the model run alone, greedy and
// sampled, including max_tokens 1, and usage is honest.
func TestDisaggregatedEqualsSolo(t *testing.T) {
	p := startPair(t, setup{})
	cases := []struct {
		prompt string
		max    int
		s      peerapi.Sampling
	}{
		{"Lily and Tom went to the park. They saw a big dog", 40, peerapi.Sampling{}},
		{"Once upon a time", 1, peerapi.Sampling{}},
		{"The cat sat on the mat and", 30, peerapi.Sampling{Temperature: 0.9, TopP: 0.95, Seed: 7}},
	}
	for _, c := range cases {
		prompt := encode(c.prompt)
		want := solo(t, prompt, c.max, c.s.Params())
		got, last, pr := p.run(prompt, c.max, c.s)
		if !pr.OK || pr.BytesSent == 0 || pr.FirstToken != want[0] {
			t.Fatalf("%q: prefill %+v (error %+v), want OK with first token %d", c.prompt, pr, pr.Error, want[0])
		}
		if last.Type != peerapi.EventDone {
			t.Fatalf("%q: stream ended with %+v (error %+v)", c.prompt, last, last.Error)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%q: disaggregated output differs from solo:\n got %v\nwant %v", c.prompt, got, want)
		}
		if last.Usage == nil || last.Usage.PromptTokens != len(prompt) || last.Usage.CompletionTokens != len(want) {
			t.Fatalf("%q: usage %+v, want %d prompt and %d completion tokens", c.prompt, last.Usage, len(prompt), len(want))
		}
	}
	p.idle()
	if v := p.metric(p.decURL, "bulkhead_kv_transfers_completed_total"); v != "3" {
		t.Errorf("decode completed transfers = %q, want 3", v)
	}
	if v := p.metric(p.preURL, "bulkhead_kv_transfers_completed_total"); v != "3" {
		t.Errorf("prefill completed transfers = %q, want 3", v)
	}
}

// TestConcurrentPSK runs several requests at once under the pre-shared
// key mode.
func TestConcurrentPSK(t *testing.T) {
	p := startPair(t, setup{psk: true})
	prompts := []string{"Once upon a time there was", "The sun was hot and", "Ben had a red ball", "A little bird sang"}
	var wg sync.WaitGroup
	for _, s := range prompts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			prompt := encode(s)
			want := solo(t, prompt, 20, peerapi.Sampling{}.Params())
			got, last, pr := p.run(prompt, 20, peerapi.Sampling{})
			if !pr.OK || last.Type != peerapi.EventDone || fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("%q: prefill %+v, last %+v, got %v want %v", s, pr, last, got, want)
			}
		}()
	}
	wg.Wait()
	p.idle()
}

// TestPrefillAdmissionRejects: a prompt over the prefill server's own
// input limit gets the original 400-kind error without a byte sent or a
// page allocated on prefill; the router cancels decode's reservation,
// acknowledged, and both pools end free.
func TestPrefillAdmissionRejects(t *testing.T) {
	p := startPair(t, setup{pre: func(c *config.Config) { c.MaxInputTokens = 8 }})
	for _, n := range []int{8, 9} { // at the limit, then one over
		prompt := encode("Lily and Tom went to the park. They saw a big dog and a cat")[:n]
		id := transfer.NewID().String()
		g := p.generate(context.Background(), peerapi.GenerateRequest{ID: id, Tenant: "acme", Prompt: prompt, MaxTokens: 5})
		if ev, err := g.next(); err != nil || ev.Type != peerapi.EventReserved {
			t.Fatalf("reserve: %+v %v", ev, err)
		}
		pr := p.prefill(context.Background(), peerapi.PrefillRequest{ID: id, Tenant: "acme", Prompt: prompt, MaxTokens: 5, DecodeKVAddr: p.kvAddr})
		if n == 8 {
			if !pr.OK {
				t.Fatalf("prompt at the limit: %+v", pr.Error)
			}
			if _, last, _ := g.rest(); last.Type != peerapi.EventDone {
				t.Fatalf("prompt at the limit: %+v", last)
			}
			continue
		}
		allocs := p.metric(p.preURL, "bulkhead_kv_page_allocations_total")
		if pr.OK || pr.Error == nil || pr.Error.Kind != "bad_input" || pr.Error.Code != "context_length_exceeded" || pr.BytesSent != 0 {
			t.Fatalf("over the prefill limit: %+v (error %+v)", pr, pr.Error)
		}
		if e := pr.Error.Err(); e.Kind.String() != "bad_input" {
			t.Fatalf("error does not decode to its kind: %+v", e)
		}
		if c := p.cancel(p.decURL, id); !c.Known {
			t.Fatal("decode did not know the reservation it was asked to cancel")
		}
		if _, last, _ := g.rest(); last.Type != peerapi.EventError || last.Error.Code != transfer.CodeCancelled {
			t.Fatalf("cancelled reservation ended with %+v", last)
		}
		if c := p.cancel(p.decURL, id); c.Known {
			t.Error("a second cancel of a finished id says known")
		}
		if a := p.metric(p.preURL, "bulkhead_kv_page_allocations_total"); a != allocs {
			t.Errorf("prefill allocated pages for a rejected prompt: %s -> %s", allocs, a)
		}
	}
	p.idle()
}

// TestReplayAndUnknownID: decode refuses an id it has seen, and refuses
// KV for an id it never reserved.
func TestReplayAndUnknownID(t *testing.T) {
	p := startPair(t, setup{})
	prompt := encode("Once upon a time")
	id := transfer.NewID().String()
	g := p.generate(context.Background(), peerapi.GenerateRequest{ID: id, Tenant: "acme", Prompt: prompt, MaxTokens: 4})
	if ev, _ := g.next(); ev.Type != peerapi.EventReserved {
		t.Fatalf("reserve: %+v", ev)
	}
	if pr := p.prefill(context.Background(), peerapi.PrefillRequest{ID: id, Tenant: "acme", Prompt: prompt, MaxTokens: 4, DecodeKVAddr: p.kvAddr}); !pr.OK {
		t.Fatalf("prefill: %+v", pr.Error)
	}
	if _, last, _ := g.rest(); last.Type != peerapi.EventDone {
		t.Fatalf("first use: %+v", last)
	}
	g = p.generate(context.Background(), peerapi.GenerateRequest{ID: id, Tenant: "acme", Prompt: prompt, MaxTokens: 4})
	if ev, _ := g.next(); ev.Type != peerapi.EventError || ev.Error.Code != transfer.CodeReplayed {
		t.Fatalf("replayed id: %+v (%+v)", ev, ev.Error)
	}
	g.resp.Body.Close()
	for _, bad := range []string{"", "00000000000000000000000000000000", "xyz"} {
		g = p.generate(context.Background(), peerapi.GenerateRequest{ID: bad, Tenant: "acme", Prompt: prompt, MaxTokens: 4})
		if ev, _ := g.next(); ev.Type != peerapi.EventError || ev.Error.Kind != "bad_input" {
			t.Fatalf("id %q: %+v", bad, ev)
		}
		g.resp.Body.Close()
	}
	pr := p.prefill(context.Background(), peerapi.PrefillRequest{ID: transfer.NewID().String(), Tenant: "acme", Prompt: prompt, MaxTokens: 4, DecodeKVAddr: p.kvAddr})
	if pr.OK || pr.Error == nil || pr.Error.Code != transfer.CodeUnknownID {
		t.Fatalf("prefill for an id decode never reserved: %+v (%+v)", pr, pr.Error)
	}
	p.idle()
}

// TestDecodePoolFull: no room on decode is an error at reservation,
// never a partial transfer.
func TestDecodePoolFull(t *testing.T) {
	p := startPair(t, setup{dec: func(c *config.Config) { c.ContextLen = 64; c.KV.Pages = 4 }})
	prompt := encode("Once upon a time")
	hold := p.generate(context.Background(), peerapi.GenerateRequest{ID: transfer.NewID().String(), Tenant: "acme", Prompt: prompt, MaxTokens: 50})
	if ev, _ := hold.next(); ev.Type != peerapi.EventReserved {
		t.Fatalf("first reservation: %+v", ev)
	}
	g := p.generate(context.Background(), peerapi.GenerateRequest{ID: transfer.NewID().String(), Tenant: "acme", Prompt: prompt, MaxTokens: 4})
	if ev, _ := g.next(); ev.Type != peerapi.EventError || ev.Error.Kind != "overload" {
		t.Fatalf("reservation on a full pool: %+v (%+v)", ev, ev.Error)
	}
	g.resp.Body.Close()
	hold.resp.Body.Close() // the router hangs up: the reservation goes
	p.idle()
}

// TestHangUps: the router hanging up on decode mid-transfer or
// mid-stream, or on prefill mid-transfer, frees everything on both sides
// and never yields a success.
func TestHangUps(t *testing.T) {
	// A delay before each frame keeps the transfer in flight long enough to
	// cut. The prompt fits in one DATA frame, and with this seed OPEN, DATA
	// and COMMIT wait 158, 193 and 207ms (every connection draws the same).
	p := startPair(t, setup{preFaults: "delay=300ms,seed=1"})
	prompt := encode("Lily and Tom went to the park. They saw a big dog and a cat and a bird")
	// opened waits until decode has received the OPEN of a transfer that
	// started after before was read: the cuts below fall while DATA waits
	// its 193ms, which a fixed timer cannot promise on a loaded machine.
	const received = "bulkhead_kv_transfer_bytes_received_total"
	opened := func(t *testing.T, before string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); p.metric(p.decURL, received) == before; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("decode received no OPEN")
			}
		}
	}

	t.Run("decode mid-transfer", func(t *testing.T) {
		id := transfer.NewID().String()
		ctx, cancel := context.WithCancel(context.Background())
		g := p.generate(ctx, peerapi.GenerateRequest{ID: id, Tenant: "acme", Prompt: prompt, MaxTokens: 10})
		if ev, _ := g.next(); ev.Type != peerapi.EventReserved {
			t.Fatalf("reserve: %+v", ev)
		}
		before := p.metric(p.decURL, received)
		res := make(chan peerapi.PrefillResult)
		go func() {
			res <- p.prefill(context.Background(), peerapi.PrefillRequest{ID: id, Tenant: "acme", Prompt: prompt, MaxTokens: 10, DecodeKVAddr: p.kvAddr})
		}()
		opened(t, before)
		cancel()
		g.resp.Body.Close()
		if pr := <-res; pr.OK || pr.Error == nil {
			t.Fatalf("prefill after decode hung up: %+v", pr)
		}
		p.idle()
	})
	t.Run("prefill mid-transfer", func(t *testing.T) {
		id := transfer.NewID().String()
		g := p.generate(context.Background(), peerapi.GenerateRequest{ID: id, Tenant: "acme", Prompt: prompt, MaxTokens: 10})
		if ev, _ := g.next(); ev.Type != peerapi.EventReserved {
			t.Fatalf("reserve: %+v", ev)
		}
		// The router hangs up on prefill once decode has the OPEN: prefill
		// must then send the ABORT and never the COMMIT.
		before := p.metric(p.decURL, received)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		res := make(chan peerapi.PrefillResult)
		go func() {
			res <- p.prefill(ctx, peerapi.PrefillRequest{ID: id, Tenant: "acme", Prompt: prompt, MaxTokens: 10, DecodeKVAddr: p.kvAddr})
		}()
		opened(t, before)
		cancel()
		if pr := <-res; pr.OK {
			t.Fatal("prefill succeeded although the router hung up")
		}
		if _, last, _ := g.rest(); last.Type != peerapi.EventError {
			t.Fatalf("decode after prefill's transfer was cancelled: %+v", last)
		}
		p.idle()
	})
	t.Run("decode mid-stream", func(t *testing.T) {
		id := transfer.NewID().String()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		g := p.generate(ctx, peerapi.GenerateRequest{ID: id, Tenant: "acme", Prompt: encode("Once"), MaxTokens: 200})
		if ev, _ := g.next(); ev.Type != peerapi.EventReserved {
			t.Fatalf("reserve: %+v", ev)
		}
		if pr := p.prefill(context.Background(), peerapi.PrefillRequest{ID: id, Tenant: "acme", Prompt: encode("Once"), MaxTokens: 200, DecodeKVAddr: p.kvAddr}); !pr.OK {
			t.Fatalf("prefill: %+v", pr.Error)
		}
		for {
			ev, err := g.next()
			if err != nil {
				t.Fatal(err)
			}
			if ev.Type == peerapi.EventTokens {
				break
			}
			if ev.Type != peerapi.EventReady {
				t.Fatalf("unexpected %+v", ev)
			}
		}
		cancel()
		g.resp.Body.Close()
		p.idle()
	})
	if v := p.metric(p.decURL, `bulkhead_kv_transfers_failed_total{code="transfer_cancelled"}`); v == "" {
		t.Error("decode counted no cancelled transfer")
	}
}

// TestPromptBodiesFitTheLimits: the control bodies carry the prompt as
// token ids, which can take more bytes than the client's text did. A
// prompt the servers' own limits admit is never refused as a body too
// large (a 400 "invalid_request" naming a peer path, which the router
// would pass to the client as its fault), whatever max_body_bytes says.
func TestPromptBodiesFitTheLimits(t *testing.T) {
	small := func(c *config.Config) { c.MaxBodyBytes = 1024 }
	p := startPair(t, setup{pre: small, dec: small})
	vocab := stories.m.Config.Vocab
	prompt := []int{1}
	for len(prompt) < 400 { // 400 ids of 3 digits: about 1.6 KB of JSON
		prompt = append(prompt, vocab-1-len(prompt)%7)
	}
	want := solo(t, prompt, 4, sample.Params{})
	got, last, pr := p.run(prompt, 4, peerapi.Sampling{})
	if last.Type == peerapi.EventError {
		t.Fatalf("generate: %+v", last.Error)
	}
	if !pr.OK {
		t.Fatalf("prefill: %+v", pr.Error)
	}
	if last.Type != peerapi.EventDone || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %v (%+v), want %v", got, last, want)
	}
	p.idle()
}

// TestUnknownControlFieldsRefused: a control request with a field this
// server does not know (a sampling setting from a newer router, say) is
// refused as bad input naming it, on prefill and on decode (generate
// answers in its event stream), rather than served without the setting
// the client asked for.
func TestUnknownControlFieldsRefused(t *testing.T) {
	p := startPair(t, setup{})
	for _, path := range []string{p.preURL + peerapi.PathPrefill, p.decURL + peerapi.PathGenerate} {
		body := `{"id":"00000000000000000000000000000001","tenant":"acme","prompt":[1,2,3],"max_tokens":4,"sampling":{"temperature":0,"min_p":0.1}}`
		resp, err := p.client.Post(path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(b), `unknown field \"min_p\"`) || !strings.Contains(string(b), "bad_input") && resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("%s with an unknown sampling field: %s %s", path, resp.Status, b)
		}
	}
	p.idle()
}
