package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/config"
	"github.com/bulkhead-llm/bulkhead/internal/peerauth"
	"github.com/openai/openai-go/v3"
)

// The disaggregated end-to-end tests: real `bulkhead prefill`, `decode`,
// `router` and `cluster` processes over loopback TCP with mutual TLS,
// driven by openai-go. Each process has the certificate of its own role.
// Peers are scraped through their --metrics-listen address (their control
// port serves /metrics only to peer certificates).

const disaggTenants = `
tenants:
  - name: acme
    api_keys: ["sk-acme-0123456789"]
  - name: globex
    api_keys: ["sk-globex-0123456789"]
  - name: hooli
    api_keys: ["sk-hooli-0123456789"]
  - name: soylent
    api_keys: ["sk-soylent-0123456789"]
  - name: umbrella
    api_keys: ["sk-umbrella-0123456789"]
%s`

// roleConfig is one process's YAML: limits, a pool, the shared tenants
// (extra is appended to the last tenant, umbrella) and the peers section.
func roleConfig(t *testing.T, maxInput, pages, timeoutS int, umbrellaExtra string, peers config.Peers) string {
	t.Helper()
	y := fmt.Sprintf("context_len: 256\nmax_input_tokens: %d\nbatch_tokens: 64\nmax_sequences: 16\nkv:\n  page_size: 16\n  pages: %d\n  scrub: poison\n", maxInput, pages)
	y += fmt.Sprintf(disaggTenants, umbrellaExtra)
	y += fmt.Sprintf("peers:\n  auth: mtls\n  ca: %s\n  cert: %s\n  key: %s\n  frame_bytes: 4096\n  transfer_timeout_s: %d\n", peers.CA, peers.Cert, peers.Key, timeoutS)
	if len(peers.Prefill) > 0 {
		y += fmt.Sprintf("  prefill: [%s]\n  decode: [%s]\n", strings.Join(peers.Prefill, ", "), strings.Join(peers.Decode, ", "))
	}
	return writeConfig(t, y)
}

// rolePeers is a test deployment's credentials: one CA, and one
// certificate per role (peerauth.MakeCerts).
type rolePeers map[peerauth.Role]config.Peers

func makePeers(t *testing.T) rolePeers {
	t.Helper()
	ps, err := peerauth.MakeCerts(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

var roleAnnounce = regexp.MustCompile(`^bulkhead: (prefill|decode) control on (\S+)(?: kv on (\S+))?`)

// rolePeer is a running prefill or decode process.
type rolePeer struct {
	*process
	control string // host:port of its control listener
	kv      string // host:port of its KV listener (decode)
}

// startRole runs `bulkhead ROLE --config cfg --listen 127.0.0.1:0
// --metrics-listen 127.0.0.1:0 ...` and waits for its announce line; it
// is stopped when the test ends. Its metrics are read from the metrics
// listener, as an operator's scraper without a peer certificate would.
func startRole(t *testing.T, role, cfg string, extra ...string) *rolePeer {
	t.Helper()
	args := []string{role, "--config", cfg, "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"}
	if role == "decode" {
		args = append(args, "--kv-listen", "127.0.0.1:0")
	}
	p, m := launch(t, roleAnnounce, append(args, extra...)...)
	if p.metrics == "" {
		t.Fatalf("bulkhead %s did not announce its metrics listener before its control listener", role)
	}
	p.base = "https://" + m[2]
	return &rolePeer{process: p, control: m[2], kv: m[3]}
}

// anonClient reaches a peer's TLS control port without a client
// certificate (as a load balancer's probe would); it trusts the loopback
// peer the test started.
var anonClient = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}

// waitNoLeak waits until every page of p's pool is free again and no
// lease or reservation is left.
func (p *rolePeer) waitNoLeak(t *testing.T, what string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		total, free := p.metric(t, "bulkhead_kv_pool_pages"), p.metric(t, "bulkhead_kv_pages", `state="free"`)
		leases, resv := p.metric(t, "bulkhead_kv_leases"), p.metric(t, "bulkhead_kv_reservations")
		if v := p.metric(t, "bulkhead_kv_ownership_violations_total"); v != 0 {
			t.Fatalf("%s: %v KV ownership violations", what, v)
		}
		if total > 0 && free == total && leases == 0 && resv == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v of %v pages free, %v leases, %v reservations: pages leaked", what, free, total, leases, resv)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// mustFailCleanly checks that a request failed with a server-side error
// status (never a 200 with content).
func mustFailCleanly(t *testing.T, what string, resp *openai.Completion, err error, statuses ...int) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: got a 200 with %q; want an error", what, resp.Choices[0].Text)
	}
	st := apiStatus(err)
	for _, s := range statuses {
		if st == s {
			var ae *openai.Error
			if errors.As(err, &ae) {
				t.Logf("%s: HTTP %d %s: %s", what, st, ae.Code, ae.Message)
			}
			return
		}
	}
	t.Fatalf("%s: status %d (%v); want one of %v", what, st, err, statuses)
}

// mustFailWith checks that a request failed with exactly status and
// error code, and that the message says what happened (never a 200 with
// content).
func mustFailWith(t *testing.T, what string, resp *openai.Completion, err error, status int, code, inMessage string) {
	t.Helper()
	mustFailCleanly(t, what, resp, err, status)
	var ae *openai.Error
	if !errors.As(err, &ae) || ae.Code != code || !strings.Contains(ae.Message, inMessage) {
		t.Fatalf("%s: %v; want code %s and a message containing %q", what, err, code, inMessage)
	}
}

// TestDisaggMatchesServe: 1R+1P+1D and 1R+2P+2D clusters (`bulkhead
// cluster`) give greedy outputs byte-identical to `bulkhead serve`, and to
// the reference golden lines, under concurrent load from four tenants.
func TestDisaggMatchesServe(t *testing.T) {
	cfg := writeConfig(t, fmt.Sprintf("context_len: 256\nmax_input_tokens: 200\nbatch_tokens: 64\nmax_sequences: 16\nkv:\n  page_size: 16\n  pages: 64\n  scrub: poison\n"+disaggTenants, ""))
	serve := startBulkhead(t, "serve", "--config", cfg)
	c11 := startBulkhead(t, "cluster", "--config", cfg, "--prefill", "1", "--decode", "1")
	c22 := startBulkhead(t, "cluster", "--config", cfg, "--prefill", "2", "--decode", "2")

	type job struct {
		tenant string
		prompt openai.CompletionNewParamsPromptUnion
		max    int64
		want   string // golden completion, when there is one
		// sampling, when set, replaces greedy decoding: prefill draws the
		// first token and decode the rest, so each must draw as serve does.
		sampling func(*openai.CompletionNewParams)
	}
	var jobs []job
	tenants := []string{"acme", "globex", "hooli", "soylent"}
	for i, g := range loadGolden(t) {
		if len(g.PromptTokens)+g.MaxTokens+1 > 256 {
			continue
		}
		jobs = append(jobs, job{tenant: tenants[i%4], prompt: textPrompt(g.Prompt), max: int64(g.MaxTokens + 1), want: g.Completion})
	}
	for i, n := range []int{1, 2, 17, 64, 150, 199} {
		jobs = append(jobs, job{tenant: tenants[i%4], prompt: tokenPrompt(n), max: int64(min(40, 256-n))})
	}
	for i, f := range []func(*openai.CompletionNewParams){
		func(p *openai.CompletionNewParams) {
			p.Temperature, p.TopP, p.Seed = openai.Float(0.9), openai.Float(0.95), openai.Int(7)
		},
		func(p *openai.CompletionNewParams) {
			p.FrequencyPenalty, p.PresencePenalty = openai.Float(1), openai.Float(0.5)
			p.LogitBias = map[string]int64{"13": -100, "400": 3}
		},
		func(p *openai.CompletionNewParams) {
			p.Temperature, p.Seed, p.FrequencyPenalty = openai.Float(1), openai.Int(11), openai.Float(-1)
		},
	} {
		jobs = append(jobs, job{tenant: tenants[i%4], prompt: textPrompt("Once upon a time, there was a little girl named Lily. She went to"), max: 60, sampling: f})
	}
	run := func(ctx context.Context, c openai.Client, j job) (*openai.Completion, error) {
		p := openai.CompletionNewParams{Model: "stories260K", Prompt: j.prompt, MaxTokens: openai.Int(j.max), Temperature: openai.Float(0)}
		if j.sampling != nil {
			j.sampling(&p)
		}
		return c.Completions.New(ctx, p)
	}
	ctx := context.Background()
	// serve's answers, one at a time.
	want := make([]string, len(jobs))
	for i, j := range jobs {
		resp, err := run(ctx, serve.client(tenantKeys[j.tenant]), j)
		if err != nil {
			t.Fatalf("serve job %d: %v", i, err)
		}
		want[i] = resp.Choices[0].Text
		if j.want != "" && want[i] != j.want {
			t.Fatalf("serve job %d differs from the golden line: %s", i, firstDiff(want[i], j.want))
		}
	}
	for name, p := range map[string]*process{"1R+1P+1D": c11, "1R+2P+2D": c22} {
		start := time.Now()
		var wg sync.WaitGroup
		errs := make(chan string, 3*len(jobs))
		for rep := 0; rep < 3; rep++ {
			for i, j := range jobs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					resp, err := run(ctx, p.client(tenantKeys[j.tenant]), j)
					switch {
					case err != nil:
						errs <- fmt.Sprintf("job %d (%s): %v", i, j.tenant, err)
					case resp.Choices[0].Text != want[i]:
						errs <- fmt.Sprintf("job %d (%s): %s", i, j.tenant, firstDiff(resp.Choices[0].Text, want[i]))
					}
				}()
			}
		}
		wg.Wait()
		close(errs)
		for e := range errs {
			t.Errorf("%s: %s", name, e)
		}
		t.Logf("%s: %d concurrent requests from 4 tenants equal serve's outputs (%s)", name, 3*len(jobs), time.Since(start).Round(time.Millisecond))
	}
	// Streaming through the router gives the same text, and a finish reason.
	sc := c22.client(tenantKeys["acme"])
	st := sc.Completions.NewStreaming(ctx, openai.CompletionNewParams{
		Model: "stories260K", Prompt: jobs[0].prompt, MaxTokens: openai.Int(jobs[0].max), Temperature: openai.Float(0)})
	var text strings.Builder
	finish := ""
	for st.Next() {
		if ch := st.Current(); len(ch.Choices) > 0 {
			text.WriteString(ch.Choices[0].Text)
			if f := ch.Choices[0].FinishReason; f != "" {
				finish = string(f)
			}
		}
	}
	if err := st.Err(); err != nil || text.String() != want[0] || finish == "" {
		t.Fatalf("streaming: err %v, finish %q, %s", err, finish, firstDiff(text.String(), want[0]))
	}
}

// disaggPair starts one prefill, one decode and a router over them.
type disaggPair struct {
	p, d   *rolePeer
	router *process
}

func startPair(t *testing.T, peers rolePeers, prefillCfg, decodeCfg string, routerMaxInput, timeoutS int, prefillFaults string) disaggPair {
	t.Helper()
	var extra []string
	if prefillFaults != "" {
		extra = []string{"--faults", prefillFaults}
	}
	p := startRole(t, "prefill", prefillCfg, extra...)
	d := startRole(t, "decode", decodeCfg)
	rp := peers[peerauth.RoleRouter]
	rp.Prefill, rp.Decode = []string{p.control}, []string{d.control}
	r := startBulkhead(t, "router", "--config", roleConfig(t, routerMaxInput, 64, timeoutS, "", rp))
	return disaggPair{p, d, r}
}

// TestDisaggPairLimitsDiffer: the prefill accepts at most 100 input
// tokens, decode and the router's own config 200. The router admits
// against the pair's minimum: 101 tokens is a 400 before anything moves
// (decode allocates no page, prefill sends no byte); 100 succeeds. A
// prefill-only tenant quota shows prefill's own rejection travelling back
// with its original error after decode's reservation was cancelled.
func TestDisaggPairLimitsDiffer(t *testing.T) {
	peers := makePeers(t)
	pair := startPair(t, peers,
		roleConfig(t, 100, 64, 10, "    max_kv_pages: 4\n", peers[peerauth.RolePrefill]),
		roleConfig(t, 200, 64, 10, "", peers[peerauth.RoleDecode]), 200, 10, "")
	c := pair.router.client(tenantKeys["acme"])
	ctx := context.Background()

	allocs, sent := pair.d.metric(t, "bulkhead_kv_page_allocations_total"), pair.p.metric(t, "bulkhead_kv_transfer_bytes_sent_total")
	started := pair.p.metric(t, "bulkhead_kv_transfers_started_total") + pair.d.metric(t, "bulkhead_kv_transfers_started_total")
	resp, err := complete(ctx, c, tokenPrompt(101), 10)
	mustFailCleanly(t, "101 tokens", resp, err, 400)
	if ae := (*openai.Error)(nil); !errors.As(err, &ae) || ae.Code != "context_length_exceeded" || !strings.Contains(ae.Message, "at most 100 input tokens") {
		t.Fatalf("101 tokens: %v; want context_length_exceeded naming the limit 100", err)
	}
	if a := pair.d.metric(t, "bulkhead_kv_page_allocations_total"); a != allocs {
		t.Fatalf("decode allocated %v pages for a rejected prompt", a-allocs)
	}
	if s := pair.p.metric(t, "bulkhead_kv_transfer_bytes_sent_total"); s != sent {
		t.Fatalf("prefill sent %v bytes for a rejected prompt", s-sent)
	}
	if s := pair.p.metric(t, "bulkhead_kv_transfers_started_total") + pair.d.metric(t, "bulkhead_kv_transfers_started_total"); s != started {
		t.Fatalf("a transfer started for a rejected prompt")
	}

	resp, err = complete(ctx, c, tokenPrompt(100), 10)
	if err != nil {
		t.Fatalf("100 tokens (exactly the limit): %v", err)
	}
	if resp.Usage.PromptTokens != 100 || resp.Choices[0].Text == "" {
		t.Fatalf("100 tokens: usage %+v text %q", resp.Usage, resp.Choices[0].Text)
	}
	if pair.p.metric(t, "bulkhead_kv_transfer_bytes_sent_total") == sent {
		t.Fatal("a successful request moved no KV bytes")
	}
	// Prefill's pool kept each vector's checksum as the forward pass wrote
	// it, so no frame's checksum was read from the KV at send time.
	if kept, read := pair.p.metric(t, "bulkhead_kv_transfer_frame_checksums_total", `source="kept"`),
		pair.p.metric(t, "bulkhead_kv_transfer_frame_checksums_total", `source="read"`); kept == 0 || read != 0 {
		t.Fatalf("prefill sent %v frames under kept checksums and %v checksummed at send time; want all kept", kept, read)
	}

	// umbrella may hold 4 pages (64 tokens) on the prefill only: decode
	// reserves, prefill refuses with its own error, the router cancels.
	allocs = pair.d.metric(t, "bulkhead_kv_page_allocations_total")
	resp, err = complete(ctx, pair.router.client("sk-umbrella-0123456789"), tokenPrompt(90), 10)
	mustFailCleanly(t, "prefill-only quota", resp, err, 400, 429)
	if pair.d.metric(t, "bulkhead_kv_page_allocations_total") == allocs {
		t.Fatal("decode did not reserve before prefill refused: the cancel path was not exercised")
	}
	pair.d.waitNoLeak(t, "decode after prefill's refusal")
	pair.p.waitNoLeak(t, "prefill after its refusal")

	// Without max_tokens, umbrella's request is sized to the 64 tokens its
	// prefill quota holds (advertised at the handshake), not to the
	// context, and runs.
	uc := pair.router.client("sk-umbrella-0123456789")
	resp, err = uc.Completions.New(ctx, openai.CompletionNewParams{
		Model: "stories260K", Prompt: tokenPrompt(10), Temperature: openai.Float(0)})
	if err != nil {
		t.Fatalf("umbrella without max_tokens: %v", err)
	}
	if u := resp.Usage; u.PromptTokens != 10 || u.PromptTokens+u.CompletionTokens > 64 {
		t.Fatalf("umbrella without max_tokens: usage %+v, want at most 64 tokens in all", u)
	}
	pair.d.waitNoLeak(t, "decode after umbrella's request")
}

// TestDisaggFaults: a KV connection killed mid-transfer (kill fault) is a
// 502 transfer_peer_lost; a corrupted frame is a 500 transfer_checksum
// whose message says the KV transfer failed an integrity check (decode
// detected it and says so to prefill and the router); a stalled prefill
// (delays beyond the transfer timeout) is a 502 transfer_timeout; SIGKILL
// of the decode process mid-transfer is a 502; a client hanging up
// mid-transfer gets nothing. Never a 200 with content, and every page is
// free again on the surviving sides.
func TestDisaggFaults(t *testing.T) {
	peers := makePeers(t)
	pcfg, dcfg := roleConfig(t, 200, 64, 2, "", peers[peerauth.RolePrefill]), roleConfig(t, 200, 64, 2, "", peers[peerauth.RoleDecode])
	ctx := context.Background()
	prompt := tokenPrompt(120) // 120 tokens × 5 layers × 2 × 32 floats: dozens of 4 KiB frames

	t.Run("kill", func(t *testing.T) {
		pair := startPair(t, peers, pcfg, dcfg, 200, 2, "kill=frame:4")
		resp, err := complete(ctx, pair.router.client(tenantKeys["acme"]), prompt, 20)
		mustFailWith(t, "connection killed at frame 4", resp, err, 502, "transfer_peer_lost", "connection lost")
		pair.d.waitNoLeak(t, "decode")
		pair.p.waitNoLeak(t, "prefill")
	})
	t.Run("corrupt", func(t *testing.T) {
		pair := startPair(t, peers, pcfg, dcfg, 200, 2, "corrupt=1,seed=3")
		resp, err := complete(ctx, pair.router.client(tenantKeys["globex"]), prompt, 20)
		mustFailWith(t, "corrupted frames", resp, err, 500, "transfer_checksum", "the KV transfer for this request failed an integrity check")
		pair.d.waitNoLeak(t, "decode")
		pair.p.waitNoLeak(t, "prefill")
		for _, peer := range []*rolePeer{pair.d, pair.p} {
			if n := peer.metric(t, "bulkhead_kv_transfers_failed_total", `code="transfer_checksum"`); n != 1 {
				t.Errorf("%s counted %v checksum failures, want 1", peer.base, n)
			}
			if n := peer.metric(t, "bulkhead_kv_transfers_completed_total"); n != 0 {
				t.Errorf("%s counted %v completed transfers for a corrupted one", peer.base, n)
			}
		}
	})
	t.Run("stall-hangup-sigkill", func(t *testing.T) {
		pair := startPair(t, peers, pcfg, dcfg, 200, 2, "delay=3s,seed=5")
		c := pair.router.client(tenantKeys["hooli"])
		// Stalled prefill: decode's 2 s reservation deadline fails the
		// transfer on both sides.
		start := time.Now()
		resp, err := complete(ctx, c, prompt, 20)
		mustFailWith(t, "stalled prefill", resp, err, 502, "transfer_timeout", "")
		t.Logf("stalled prefill failed after %s", time.Since(start).Round(time.Millisecond))
		pair.d.waitNoLeak(t, "decode after the stall")
		pair.p.waitNoLeak(t, "prefill after the stall")

		// A client hanging up mid-transfer: the router cancels both legs.
		hctx, cancel := context.WithTimeout(ctx, 700*time.Millisecond)
		resp, err = complete(hctx, c, prompt, 20)
		cancel()
		if err == nil {
			t.Fatalf("hang-up: got a 200 with %q", resp.Choices[0].Text)
		}
		pair.d.waitNoLeak(t, "decode after the hang-up")
		pair.p.waitNoLeak(t, "prefill after the hang-up")

		// SIGKILL of decode mid-transfer: the client gets an error, the
		// prefill frees its pages.
		done := make(chan error, 1)
		go func() {
			resp, err := complete(ctx, c, prompt, 20)
			if err == nil {
				err = fmt.Errorf("a 200 with %q", resp.Choices[0].Text)
				done <- err
				return
			}
			if s := apiStatus(err); s != 502 {
				err = fmt.Errorf("status %d, want 502: %w", s, err)
				done <- err
				return
			}
			if ae := (*openai.Error)(nil); errors.As(err, &ae) {
				t.Logf("decode killed mid-transfer: HTTP %d %s: %s", ae.StatusCode, ae.Code, ae.Message)
			}
			done <- nil
		}()
		deadline := time.Now().Add(10 * time.Second)
		for pair.p.metric(t, "bulkhead_kv_transfers_in_progress") == 0 {
			if time.Now().After(deadline) {
				t.Fatal("the transfer never started")
			}
			time.Sleep(20 * time.Millisecond)
		}
		pair.d.cmd.Process.Kill()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("decode killed mid-transfer: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("decode killed mid-transfer: the client never got an answer")
		}
		pair.p.waitNoLeak(t, "prefill after decode died")
	})
}
