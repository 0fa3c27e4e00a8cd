package main

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/model"
	"github.com/bulkhead-llm/bulkhead/internal/peerauth"
)

// withDType rewrites the YAML at path to store KV as dtype.
func withDType(t *testing.T, path, dtype string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	y := strings.Replace(string(b), "  scrub: poison\n", "  scrub: poison\n  dtype: "+dtype+"\n", 1)
	if y == string(b) {
		t.Fatal("config has no kv.scrub line to put the dtype after")
	}
	return writeConfig(t, y)
}

// TestDisaggF16KV: a prefill and a decode server that both store KV as
// f16 (kv.dtype: f16) answer the golden prompts byte for byte through the
// router, and a transfer moves the f16 bytes (half of f32's) over real
// TCP; every page is free afterwards. A prefill and a decode server whose
// cache types differ never form a pair: the router refuses to start and
// says why.
func TestDisaggF16KV(t *testing.T) {
	peers := makePeers(t)
	pf16 := withDType(t, roleConfig(t, 200, 64, 10, "", peers[peerauth.RolePrefill]), "f16")
	df32 := roleConfig(t, 200, 64, 10, "", peers[peerauth.RoleDecode])
	df16 := withDType(t, df32, "f16")
	pair := startPair(t, peers, pf16, df16, 200, 10, "")
	c := pair.router.client(tenantKeys["acme"])
	ctx := context.Background()
	checked := 0
	for _, g := range loadGolden(t) {
		if len(g.PromptTokens)+g.MaxTokens+1 > 256 {
			continue
		}
		resp, err := complete(ctx, c, textPrompt(g.Prompt), int64(g.MaxTokens+1))
		if err != nil {
			t.Fatalf("%q: %v", g.Prompt, err)
		}
		if got := resp.Choices[0].Text; got != g.Completion {
			t.Fatalf("%q over an f16 pair: %s", g.Prompt, firstDiff(got, g.Completion))
		}
		checked++
	}
	if checked == 0 {
		t.Fatal("no golden prompt fits the context")
	}

	m, err := model.Default()
	if err != nil {
		t.Fatal(err)
	}
	const n = 150
	f16Payload := float64(n * m.Config.Layers * 2 * m.Config.KVDim() * 2)
	before := pair.p.metric(t, "bulkhead_kv_transfer_bytes_sent_total")
	if _, err := complete(ctx, c, tokenPrompt(n), 4); err != nil {
		t.Fatal(err)
	}
	sent := pair.p.metric(t, "bulkhead_kv_transfer_bytes_sent_total") - before
	// Frame heads, CRCs, OPEN and COMMIT add a little; an f32 payload
	// would be twice as large.
	if sent < f16Payload || sent > 1.1*f16Payload {
		t.Fatalf("a %d-token prompt sent %v bytes; its f16 KV is %v bytes (f32: %v)", n, sent, f16Payload, 2*f16Payload)
	}
	t.Logf("%d golden prompts equal; a %d-token prompt moved %v bytes for %v bytes of f16 KV", checked, n, sent, f16Payload)
	pair.p.waitNoLeak(t, "f16 prefill")
	pair.d.waitNoLeak(t, "f16 decode")

	// Mixed cache types: the router must refuse the pair at handshake.
	p := startRole(t, "prefill", pf16)
	d := startRole(t, "decode", df32)
	rp := peers[peerauth.RoleRouter]
	rp.Prefill, rp.Decode = []string{p.control}, []string{d.control}
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(cctx, bulkheadBinary(t), "router", "--config", roleConfig(t, 200, 64, 10, "", rp), "--listen", "127.0.0.1:0").CombinedOutput()
	if err == nil || cctx.Err() != nil {
		t.Fatalf("router over an f16 prefill and an f32 decode server: err %v (context %v); want it to refuse to start\n%s", err, cctx.Err(), out)
	}
	if msg := string(out); !strings.Contains(msg, "refusing to start") || !strings.Contains(msg, "f16") || !strings.Contains(msg, "f32") {
		t.Fatalf("router's refusal does not name the cache types:\n%s", msg)
	}
}
