package decodesrv_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/config"
	"github.com/bulkhead-llm/bulkhead/internal/decodesrv"
	"github.com/bulkhead-llm/bulkhead/internal/kernels"
	"github.com/bulkhead-llm/bulkhead/internal/kv"
	"github.com/bulkhead-llm/bulkhead/internal/model"
	"github.com/bulkhead-llm/bulkhead/internal/peerapi"
	"github.com/bulkhead-llm/bulkhead/internal/peerauth"
	"github.com/bulkhead-llm/bulkhead/internal/prefillsrv"
	"github.com/bulkhead-llm/bulkhead/internal/sample"
	"github.com/bulkhead-llm/bulkhead/internal/server"
	"github.com/bulkhead-llm/bulkhead/internal/transfer"
)

// pair is one prefill and one decode server on loopback, and a client
// that speaks peerapi the way the router does.
type pair struct {
	t      *testing.T
	pre    *prefillsrv.Server
	dec    *decodesrv.Server
	preURL string // control base URL
	decURL string
	kvAddr string
	// auths are each role's credentials; client calls as the router.
	auths    map[peerauth.Role]*peerauth.Auth
	peers    map[peerauth.Role]config.Peers
	client   *http.Client
	stopped  chan struct{}
	stopBoth func()
	// stopDecode starts the decode server's shutdown (as SIGTERM does);
	// decAddr is its control listener's address.
	stopDecode func()
	decAddr    string
}

type setup struct {
	psk       bool
	pre, dec  func(*config.Config)
	preFaults string
	decFaults string
	decLog    io.Writer // decode's log (text); nil: discarded
}

func baseConfig(peers config.Peers) *config.Config {
	c := config.Default()
	c.Threads = 1
	c.BatchTokens = 64
	c.MaxSequences = 8
	c.Peers.Auth, c.Peers.CA, c.Peers.Cert, c.Peers.Key, c.Peers.PSKFile = peers.Auth, peers.CA, peers.Cert, peers.Key, peers.PSKFile
	c.Peers.FrameBytes = 4096 // about one token per frame: many frames
	c.Peers.Window = 4
	c.Peers.TransferTimeout = 5
	c.KV.Scrub = config.ScrubPoison
	return c
}

func startPair(t *testing.T, st setup) *pair {
	t.Helper()
	dir := t.TempDir()
	// Each role has its own certificate (under psk, the one key): the
	// servers load theirs from their configs, the listeners below are
	// made from the same files, and the test calls as the router.
	peers := map[peerauth.Role]config.Peers{}
	if st.psk {
		psk := config.Peers{Auth: config.PeerAuthPSK, PSKFile: filepath.Join(dir, "psk")}
		if err := peerauth.WritePSK(psk.PSKFile); err != nil {
			t.Fatal(err)
		}
		for _, r := range peerauth.Roles() {
			peers[r] = psk
		}
	} else {
		var err error
		if peers, err = peerauth.MakeCerts(dir, nil); err != nil {
			t.Fatal(err)
		}
	}
	auths := map[peerauth.Role]*peerauth.Auth{}
	for r, p := range peers {
		a, err := peerauth.Load(p)
		if err != nil {
			t.Fatal(err)
		}
		auths[r] = a
	}
	pcfg, dcfg := baseConfig(peers[peerauth.RolePrefill]), baseConfig(peers[peerauth.RoleDecode])
	if st.pre != nil {
		st.pre(pcfg)
	}
	if st.dec != nil {
		st.dec(dcfg)
	}
	pf, err := transfer.ParseFaults(st.preFaults)
	if err != nil {
		t.Fatal(err)
	}
	df, err := transfer.ParseFaults(st.decFaults)
	if err != nil {
		t.Fatal(err)
	}
	pre, err := prefillsrv.New(pcfg, nil, prefillsrv.Options{Faults: pf, Drain: 2 * time.Second, Retry: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var dlog *slog.Logger
	if st.decLog != nil {
		dlog = slog.New(slog.NewTextHandler(st.decLog, nil))
	}
	dec, err := decodesrv.New(dcfg, dlog, decodesrv.Options{Faults: df, Drain: 2 * time.Second, TickEvery: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	pln, err := auths[peerauth.RolePrefill].ListenHTTP("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dln, err := auths[peerauth.RoleDecode].ListenHTTP("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	kln, err := auths[peerauth.RoleDecode].Listen("tcp", "127.0.0.1:0", peerauth.RolePrefill)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	dctx, stopDecode := context.WithCancel(ctx)
	router := auths[peerauth.RoleRouter]
	p := &pair{t: t, pre: pre, dec: dec, auths: auths, peers: peers, client: router.HTTPClient(peerauth.RolePrefill, peerauth.RoleDecode), stopped: make(chan struct{}),
		preURL: router.URL(pln.Addr().String(), ""), decURL: router.URL(dln.Addr().String(), ""),
		stopDecode: stopDecode, decAddr: dln.Addr().String()}
	errs := make(chan error, 2)
	go func() { errs <- pre.Run(ctx, pln) }()
	go func() { errs <- dec.Run(dctx, dln, kln) }()
	p.stopBoth = func() {
		cancel()
		for range 2 {
			if err := <-errs; err != nil {
				t.Errorf("server Run: %v", err)
			}
		}
	}
	t.Cleanup(p.stopBoth)
	var info peerapi.Info
	p.getJSON(p.decURL+peerapi.PathInfo, &info)
	if info.Role != "decode" || info.KVAddr == "" {
		t.Fatalf("decode info %+v", info)
	}
	p.kvAddr = info.KVAddr
	var pinfo peerapi.Info
	p.getJSON(p.preURL+peerapi.PathInfo, &pinfo)
	if pinfo.Role != "prefill" || pinfo.Fingerprint != info.Fingerprint || pinfo.Layers != info.Layers || pinfo.KVDim != info.KVDim {
		t.Fatalf("prefill info %+v does not pair with decode %+v", pinfo, info)
	}
	return p
}

func (p *pair) getJSON(url string, v any) {
	p.t.Helper()
	resp, err := p.client.Get(url)
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		p.t.Fatalf("GET %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		p.t.Fatal(err)
	}
}

func (p *pair) postJSON(ctx context.Context, url string, in, out any) error {
	b, _ := json.Marshal(in)
	req, _ := http.NewRequestWithContext(ctx, "POST", url, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	resp, err := p.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(out)
}

// genStream is an open generate stream.
type genStream struct {
	resp *http.Response
	dec  *json.Decoder
}

func (p *pair) generate(ctx context.Context, req peerapi.GenerateRequest) *genStream {
	p.t.Helper()
	b, _ := json.Marshal(req)
	hr, _ := http.NewRequestWithContext(ctx, "POST", p.decURL+peerapi.PathGenerate, bytes.NewReader(b))
	resp, err := p.client.Do(hr)
	if err != nil {
		p.t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		p.t.Fatalf("generate: %s", resp.Status)
	}
	return &genStream{resp: resp, dec: json.NewDecoder(resp.Body)}
}

func (g *genStream) next() (peerapi.Event, error) {
	var ev peerapi.Event
	err := g.dec.Decode(&ev)
	return ev, err
}

// rest reads events to the end: the tokens, and the final event.
func (g *genStream) rest() ([]int, peerapi.Event, error) {
	defer g.resp.Body.Close()
	var toks []int
	for {
		ev, err := g.next()
		if err != nil {
			return toks, ev, err
		}
		switch ev.Type {
		case peerapi.EventTokens:
			toks = append(toks, ev.Tokens...)
		case peerapi.EventDone, peerapi.EventError:
			return toks, ev, nil
		}
	}
}

func (p *pair) prefill(ctx context.Context, req peerapi.PrefillRequest) peerapi.PrefillResult {
	var res peerapi.PrefillResult
	if err := p.postJSON(ctx, p.preURL+peerapi.PathPrefill, req, &res); err != nil {
		res.Error = &peerapi.Error{Kind: "client", Message: err.Error()}
	}
	return res
}

func (p *pair) cancel(url, id string) peerapi.CancelResult {
	var res peerapi.CancelResult
	if err := p.postJSON(context.Background(), url+peerapi.PathCancel, peerapi.CancelRequest{ID: id}, &res); err != nil {
		p.t.Fatal(err)
	}
	return res
}

// run does what the router does for one request: reserve on decode, then
// prefill, then read decode's stream.
func (p *pair) run(prompt []int, maxTokens int, s peerapi.Sampling) ([]int, peerapi.Event, peerapi.PrefillResult) {
	p.t.Helper()
	id := transfer.NewID().String()
	g := p.generate(context.Background(), peerapi.GenerateRequest{ID: id, Tenant: "acme", Prompt: prompt, MaxTokens: maxTokens, Sampling: s})
	ev, err := g.next()
	if err != nil {
		p.t.Fatal(err)
	}
	if ev.Type != peerapi.EventReserved {
		g.resp.Body.Close()
		return nil, ev, peerapi.PrefillResult{}
	}
	pr := p.prefill(context.Background(), peerapi.PrefillRequest{ID: id, Tenant: "acme", Prompt: prompt, MaxTokens: maxTokens, Sampling: s, DecodeKVAddr: p.kvAddr})
	if !pr.OK {
		p.cancel(p.decURL, id) // the first failure cancels the other leg
	}
	toks, last, err := g.rest()
	if err != nil {
		p.t.Fatalf("reading the generate stream: %v", err)
	}
	return toks, last, pr
}

// idle waits until both pools are entirely free with no lease and no
// reservation, and fails the test if they do not get there.
func (p *pair) idle() {
	p.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ps, ds := p.pre.Pool.Stats(), p.dec.Pool.Stats()
		di := p.dec.Info()
		ok := ps.Free == ps.Pages && ps.Leases == 0 && ds.Free == ds.Pages && ds.Leases == 0 && di.Load.Transfers == 0 &&
			ps.Violations == 0 && ds.Violations == 0
		if ok {
			for name, pool := range map[string]*kv.Pool{"prefill": p.pre.Pool, "decode": p.dec.Pool} {
				if err := pool.CheckScrubbed(); err != nil {
					p.t.Errorf("%s pool: %v", name, err)
				}
			}
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("pools not idle: prefill %+v; decode %+v; live reservations %d", ps, ds, di.Load.Transfers)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// metric returns the value of one sample line of a server's /metrics.
func (p *pair) metric(base, name string) string {
	p.t.Helper()
	resp, err := p.client.Get(base + "/metrics")
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return v
		}
	}
	return ""
}

var stories struct {
	m *model.Model
}

func TestMain(m *testing.M) {
	mod, err := server.LoadModel(config.Default())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	stories.m = mod
	code := m.Run()
	mod.Close()
	os.Exit(code)
}

// solo is the reference: the model run alone over an unpaged cache.
func solo(t *testing.T, prompt []int, maxTokens int, p sample.Params) []int {
	t.Helper()
	m := stories.m
	threads := kernels.NewPool(1)
	defer threads.Close()
	var out []int
	_, err := m.NewRunner(threads, 64, 0).Generate(prompt, model.NewDenseCache(&m.Config, len(prompt)+maxTokens), maxTokens, sample.New(p),
		func(tok int) bool { out = append(out, tok); return true })
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func encode(s string) []int { return stories.m.Tokenizer.Encode(s, true) }
