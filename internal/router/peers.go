package router

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/engine"
	"github.com/bulkhead-llm/bulkhead/internal/errkind"
	"github.com/bulkhead-llm/bulkhead/internal/peerapi"
	"github.com/bulkhead-llm/bulkhead/internal/peerauth"
	"github.com/bulkhead-llm/bulkhead/internal/transfer"
)

// Roles, as peerapi.Info.Role spells them.
const (
	RolePrefill = "prefill"
	RoleDecode  = "decode"
)

// peer is one configured prefill or decode server, as the router sees it.
type peer struct {
	role string
	addr string // control address, host:port, exactly as configured
	base string // scheme://addr
	// client makes every call to the peer. With peer auth it accepts only
	// a server certificate of the peer's configured role, so a server of
	// another role at this address is refused at the TLS handshake rather
	// than trusted on what its Info says it is.
	client *http.Client

	mu   sync.Mutex
	info peerapi.Info // last successful info
	up   bool         // pairing may send it requests
	// counted: the router's limits count this peer as one that can serve
	// (refreshLimits). It is set with up, but before it when the peer
	// comes up, so that the limits it brings are in place by the time it
	// takes a request, and cleared with up.
	counted bool
	// key is the identity the peer's certificate presented on the last
	// call that got an answer (peerauth.KeyIdentity; zero without TLS): a
	// reservation names its prefill by it, so that decode takes the KV
	// only from that prefill's connection.
	key      transfer.Identity
	fails    int    // consecutive failed health checks or calls
	why      string // why it is down, for logs and Peers()
	inflight int    // requests this router has on it now

	// slots bounds the prefills this router runs on the peer at once
	// (prefill peers only). A request takes a slot before it reserves
	// anything on decode, so requests queue here, holding nothing, rather
	// than holding decode reservations whose leases expire while they wait
	// for a busy prefill.
	slots chan struct{}
}

// PeerStatus is a peer's state as the router last saw it.
type PeerStatus struct {
	Role     string
	Addr     string
	Up       bool
	Why      string // why it is down ("" when up)
	Inflight int
	Load     peerapi.Load
	// Limits are those it last announced: it is sent only requests they
	// admit, whatever the router's own (Router.Limits) admit.
	Limits engine.Limits
}

func (p *peer) status() PeerStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	return PeerStatus{Role: p.role, Addr: p.addr, Up: p.up, Why: p.why, Inflight: p.inflight, Load: p.info.Load, Limits: p.info.Limits}
}

// score is the peer's load for pairing: what it reported plus what this
// router sent it since (the report is up to a health period old).
func (p *peer) score() (int, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	l := p.info.Load
	return l.Running + l.Queued + l.Transfers + p.inflight, p.up
}

// identity is the key p last presented (zero: never seen over TLS).
func (p *peer) identity() transfer.Identity {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.key
}

// do makes one call to p and notes the key its certificate presented on
// that connection. Every answer refreshes it, so a peer that restarted
// with another certificate is named by its new key from its first answer
// on (a health check at the latest), not by the one it had at handshake.
func (p *peer) do(req *http.Request) (*http.Response, error) {
	resp, err := p.client.Do(req)
	if err != nil {
		return resp, err
	}
	if id, ok := peerauth.KeyIdentity(resp.TLS); ok {
		p.mu.Lock()
		p.key = id
		p.mu.Unlock()
	}
	return resp, nil
}

func (p *peer) isUp() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.up
}

func (p *peer) addInflight(d int) {
	p.mu.Lock()
	p.inflight += d
	p.mu.Unlock()
}

// --- HTTP calls. Every call goes to p.base, which comes from the
// configured address list and nothing else.

// getInfo asks the peer for its Info.
func (r *Router) getInfo(ctx context.Context, p *peer) (peerapi.Info, error) {
	var info peerapi.Info
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.base+peerapi.PathInfo, nil)
	if err != nil {
		return info, err
	}
	resp, err := p.do(req)
	if err != nil {
		return info, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return info, fmt.Errorf("%s %s: %s", p.role, p.addr, httpFailure(resp))
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&info); err != nil {
		return info, fmt.Errorf("%s %s: bad info: %w", p.role, p.addr, err)
	}
	return info, nil
}

// post sends body as JSON to path, once: a call that fails after it was
// written is not sent again (see replayable).
func (r *Router) post(ctx context.Context, p *peer, path string, body any) (*http.Response, error) {
	return r.postKeyed(ctx, p, path, body, "")
}

// replayable is post for a call that a peer may receive twice
// (peerapi.HeaderIdempotencyKey, set to key, the transfer id). Go's
// transport then re-sends it on a fresh connection when the kept-alive
// connection it was written on failed before any byte of the answer: a
// peer restarted at the same address, whose old connection the router
// had not yet seen closed, would otherwise turn the call into a 502.
// The copy goes to the same address with the same bytes (same id,
// tenant, prompt), and each call marked so is safe twice:
//   - PREFILL: on one prefill process a second copy for an id still in
//     flight is refused (prefillsrv's active map: transfer_replayed_id,
//     nothing computed); on another process (the restart), or after the
//     first ended, each copy dials its own KV connection, and decode's
//     Table binds a reservation to the first connection that OPENs it:
//     a second OPEN, live or after the end, is refused or ignored
//     (transfer.Receiver.frame: "bound to another connection";
//     Table.frame: a finished id answers only its own connection), so
//     two senders never write one reservation, and the same bytes cannot
//     name another tenant (decode checks OPEN's tenant anyway);
//   - CANCEL: cancels are idempotent (an unknown or finished id answers
//     Known=false), and are retried until acknowledged anyway;
//   - EXPECT: naming the same key twice is naming it once; decode
//     refuses it once a prefill opened the transfer, as it would the
//     first copy.
//
// A reservation (generate) is not: its copy would be refused as a
// replayed id once the first reserved, and reserve already retries a
// lost call under a fresh id.
func (r *Router) replayable(ctx context.Context, p *peer, path string, body any, key string) (*http.Response, error) {
	return r.postKeyed(ctx, p, path, body, key)
}

// postKeyed is post with peerapi.HeaderIdempotencyKey set to key when key
// is not empty. The body is a bytes.Reader, so the request has GetBody,
// which the transport needs to send it again.
func (r *Router) postKeyed(ctx context.Context, p *peer, path string, body any, key string) (*http.Response, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.base+path, bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set(peerapi.HeaderIdempotencyKey, key)
	}
	return p.do(req)
}

// expect tells decode d that transfer id is now prefill key's to send
// (peerapi.ExpectRequest); it fails when d did not take it, above all
// when a prefill opened the transfer already.
func (r *Router) expect(ctx context.Context, d *peer, id string, key transfer.Identity) error {
	ctx, done := context.WithTimeout(ctx, 2*time.Second)
	defer done()
	resp, err := r.replayable(ctx, d, peerapi.PathExpect, peerapi.ExpectRequest{ID: id, PrefillIdentity: key.String()}, id)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return peerFailure(d, resp)
	}
	return nil
}

// cancel sends an acknowledged cancel for id to p, retrying until p
// acknowledges, p is declared down, or the give-up time passes. It
// reports whether p acknowledged.
func (r *Router) cancel(p *peer, id string) bool {
	deadline := time.Now().Add(r.opts.CancelGiveUp)
	wait := 50 * time.Millisecond
	for attempt := 1; ; attempt++ {
		ok, err := r.cancelOnce(p, id)
		if ok {
			return true
		}
		if !p.isUp() || time.Now().After(deadline) || r.ctx.Err() != nil {
			r.log.Warn("cancel not acknowledged; relying on the peer's reservation lease", "role", p.role, "peer", p.addr, "transfer", id, "attempts", attempt, "err", err)
			r.metrics.failure("cancel")
			return false
		}
		select {
		case <-time.After(wait):
		case <-r.ctx.Done():
		}
		wait = min(2*wait, time.Second)
	}
}

func (r *Router) cancelOnce(p *peer, id string) (bool, error) {
	ctx, done := context.WithTimeout(r.ctx, 2*time.Second)
	defer done()
	resp, err := r.replayable(ctx, p, peerapi.PathCancel, peerapi.CancelRequest{ID: id}, id)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false, errors.New(httpFailure(resp))
	}
	var res peerapi.CancelResult
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&res); err != nil {
		return false, fmt.Errorf("bad cancel answer: %w", err)
	}
	return true, nil
}

// httpFailure describes a non-200 answer, with the peer's error message
// when it sent one.
func httpFailure(resp *http.Response) string {
	if e := wireError(resp); e != nil {
		return fmt.Sprintf("HTTP %d: %s (%s)", resp.StatusCode, e.Message, e.Code)
	}
	return "HTTP " + resp.Status
}

// wireError reads a peerapi.Error from an error response body, bare or
// under "error"; nil when the body holds neither.
func wireError(resp *http.Response) *peerapi.Error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	var bare peerapi.Error
	if json.Unmarshal(b, &bare) == nil && bare.Kind != "" {
		return &bare
	}
	var wrapped struct {
		Error *peerapi.Error `json:"error"`
	}
	if json.Unmarshal(b, &wrapped) == nil && wrapped.Error != nil && wrapped.Error.Kind != "" {
		return wrapped.Error
	}
	var res peerapi.PrefillResult
	if json.Unmarshal(b, &res) == nil && res.Error != nil {
		return res.Error
	}
	return nil
}

// peerFailure classifies an HTTP answer that is not what the protocol
// promises: the peer's own classified error when it sent one (a peer's
// 4xx for its own admission travels unchanged), else Unavailable. A peer
// refusing the router's peer credentials is Unavailable too: peers never
// see the client's API key, so their Auth error is about the deployment,
// and passed on it would tell the client (401) that its key was refused.
func peerFailure(p *peer, resp *http.Response) *errkind.Error {
	e := wireError(resp)
	if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden || (e != nil && e.Err().Kind == errkind.Auth) {
		return errkind.Wrap(errkind.Unavailable, "peer_auth_failed", fmt.Errorf("%s %s: %s", p.role, p.addr, describe(resp.StatusCode, e)),
			fmt.Sprintf("the %s server refused the router's peer credentials", p.role))
	}
	if e != nil {
		return e.Err()
	}
	return errkind.New(errkind.Unavailable, "peer_error", "the %s server answered HTTP %d", p.role, resp.StatusCode)
}

// describe is httpFailure's text for a body already read.
func describe(status int, e *peerapi.Error) string {
	if e != nil {
		return fmt.Sprintf("HTTP %d: %s (%s)", status, e.Message, e.Code)
	}
	return fmt.Sprintf("HTTP %d", status)
}

// codeUnreachable is the code of unreachable's errors.
const codeUnreachable = "peer_unavailable"

// unreachable is the client-facing error for a peer call that failed at
// the transport level.
func unreachable(p *peer, err error) *errkind.Error {
	return errkind.Wrap(errkind.Unavailable, codeUnreachable, fmt.Errorf("%s %s: %w", p.role, p.addr, err),
		fmt.Sprintf("the %s server could not be reached", p.role))
}

// compatible says why info cannot join a deployment whose reference is
// ref (the first peer's info), or "" when it can.
func compatible(role string, ref, info peerapi.Info, fingerprint string) string {
	var bad []string
	if info.Role != role {
		bad = append(bad, fmt.Sprintf("is configured as %s but says it is %q", role, info.Role))
	}
	if info.Protocol != peerapi.Protocol {
		bad = append(bad, fmt.Sprintf("speaks protocol %d, the router speaks %d", info.Protocol, peerapi.Protocol))
	}
	if fingerprint != "" && info.Fingerprint != fingerprint {
		bad = append(bad, fmt.Sprintf("serves model %s with fingerprint %s, the router's model has %s", info.Model, short(info.Fingerprint), short(fingerprint)))
	} else if info.Fingerprint != ref.Fingerprint {
		bad = append(bad, fmt.Sprintf("serves model %s with fingerprint %s, others have %s", info.Model, short(info.Fingerprint), short(ref.Fingerprint)))
	}
	if info.Layers != ref.Layers || info.KVDim != ref.KVDim || info.KVType != ref.KVType {
		bad = append(bad, fmt.Sprintf("has KV layout %d layers × %d %s, others have %d × %d %s", info.Layers, info.KVDim, info.KVType, ref.Layers, ref.KVDim, ref.KVType))
	}
	if role == RoleDecode && info.KVAddr == "" {
		bad = append(bad, "announces no KV address")
	}
	if info.Limits.ContextLen <= 0 || info.Limits.MaxInputTokens <= 0 || info.Limits.PoolTokens <= 0 {
		bad = append(bad, fmt.Sprintf("reports unusable limits %+v", info.Limits))
	}
	return strings.Join(bad, "; ")
}

func short(fp string) string {
	if len(fp) > 12 {
		return fp[:12]
	}
	if fp == "" {
		return "(none)"
	}
	return fp
}
