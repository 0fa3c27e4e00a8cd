// Package server assembles a single-process Bulkhead server from a
// configuration: model, KV pool, prefix cache, engine, HTTP API and
// metrics, and runs it until its context ends.
//
// It owns wiring and lifecycle (start, readiness, graceful shutdown), not
// behaviour: every decision about requests lives in engine and api. It must
// never start serving a configuration that failed preflight.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/api"
	"github.com/bulkhead-llm/bulkhead/internal/config"
	"github.com/bulkhead-llm/bulkhead/internal/embedded"
	"github.com/bulkhead-llm/bulkhead/internal/engine"
	"github.com/bulkhead-llm/bulkhead/internal/kernels"
	"github.com/bulkhead-llm/bulkhead/internal/kv"
	"github.com/bulkhead-llm/bulkhead/internal/metrics"
	"github.com/bulkhead-llm/bulkhead/internal/model"
	"github.com/bulkhead-llm/bulkhead/internal/prefix"
)

// Server is an assembled single-process server.
type Server struct {
	Config  *config.Config
	Model   *model.Model
	Pool    *kv.Pool
	Prefix  *prefix.Cache // nil when the prefix cache is off
	Engine  *engine.Engine
	API     *api.Server
	Metrics *metrics.Metrics
	Log     *slog.Logger

	// ModelCheckEvery is how often Run checks the model file for writes
	// in place (WatchModel); 0: the package's ModelCheckEvery.
	ModelCheckEvery time.Duration

	threads *kernels.Pool
	ready   atomic.Bool
}

// Plan is what preflight worked out: the effective limits and the memory
// they cost.
type Plan struct {
	Model          string
	ModelContext   int
	Limits         engine.Limits
	Pages          int
	PageSize       int
	KVType         model.KVType
	KVBytes        int64
	WeightBytes    int64
	FullContextFit int // full-context requests the pool holds at once
	// Notes are findings that do not stop the server but that an operator
	// should read (a tenant quota below one full-context request, say).
	Notes []string
}

// String is the plan in one line, for the log and `bulkhead preflight`.
func (p Plan) String() string {
	notes := ""
	for _, n := range p.Notes {
		notes += "; note: " + n
	}
	return fmt.Sprintf("model %s (context %d); context_len %d, max_input_tokens %d; KV pool %d pages × %d tokens = %d tokens (%.1f MiB of %v), %d full-context request(s) at once; weights %.1f MiB%s",
		p.Model, p.ModelContext, p.Limits.ContextLen, p.Limits.MaxInputTokens, p.Pages, p.PageSize, p.Limits.PoolTokens,
		float64(p.KVBytes)/(1<<20), p.KVType, p.FullContextFit, float64(p.WeightBytes)/(1<<20), notes)
}

// LoadModel opens the configured model (the embedded one when none is
// set) and names it.
func LoadModel(cfg *config.Config) (*model.Model, error) {
	m, err := model.Open(cfg.Model, cfg.Tokenizer)
	if err != nil {
		return nil, err
	}
	if cfg.ModelName != "" {
		m.Name = cfg.ModelName
	} else if cfg.Model == "" {
		m.Name = embedded.Name
	}
	return m, nil
}

// Resolve applies cfg's defaults against model m and returns the KV
// element type: kv.dtype, which m's KV layout must be able to hold, then
// config.Resolve with m's context and KV bytes per token at that type
// (what kv.memory is divided by). It changes cfg.
func Resolve(cfg *config.Config, m *model.Model) (model.KVType, error) {
	kvt, err := model.ParseKVType(cfg.KV.DType)
	if err == nil {
		err = model.CheckKVLayout(kvt, m.Config.KVDim())
	}
	if err != nil {
		return 0, fmt.Errorf("kv.dtype: %w", err)
	}
	return kvt, cfg.Resolve(m.Config.ContextLen, m.Config.KVBytesPerToken(kvt))
}

// Preflight resolves cfg against model m and checks that the deployment
// can keep its promises: one full-context request must fit in the KV pool,
// and the limits must be consistent. It changes cfg (defaults resolved).
func Preflight(cfg *config.Config, m *model.Model) (Plan, error) {
	kvt, err := Resolve(cfg, m)
	if err != nil {
		return Plan{}, fmt.Errorf("preflight: %w", err)
	}
	lim := Limits(cfg)
	p := Plan{
		Model: m.Name, ModelContext: m.Config.ContextLen, Limits: lim,
		Pages: cfg.KV.Pages, PageSize: cfg.KV.PageSize, KVType: kvt,
		KVBytes:     int64(cfg.KV.Pages) * int64(cfg.KV.PageSize) * int64(m.Config.KVBytesPerToken(kvt)),
		WeightBytes: m.WeightBytesPerToken(),
	}
	p.FullContextFit = lim.PoolTokens / (((lim.ContextLen + cfg.KV.PageSize - 1) / cfg.KV.PageSize) * cfg.KV.PageSize)
	if p.FullContextFit < 1 {
		return p, fmt.Errorf("preflight: the KV pool holds %d tokens, less than one full-context request of %d", lim.PoolTokens, lim.ContextLen)
	}
	if cfg.BatchTokens < 1 {
		return p, fmt.Errorf("preflight: batch_tokens %d must be positive", cfg.BatchTokens)
	}
	for _, t := range cfg.Tenants {
		if need := (lim.ContextLen + cfg.KV.PageSize - 1) / cfg.KV.PageSize; t.MaxKVPages > 0 && t.MaxKVPages < need {
			// Not fatal: the tenant is simply limited to shorter requests,
			// which admission enforces. Say so loudly.
			p.Notes = append(p.Notes, fmt.Sprintf("tenant %s's max_kv_pages %d holds fewer than one full-context request (%d pages)", t.Name, t.MaxKVPages, need))
		}
	}
	return p, nil
}

// Limits are the admission limits a resolved config implies.
func Limits(cfg *config.Config) engine.Limits {
	return engine.Limits{ContextLen: cfg.ContextLen, MaxInputTokens: cfg.MaxInputTokens, PoolTokens: cfg.PoolTokens()}
}

// New builds a server from cfg: loads the model, runs preflight, and
// allocates the pool. Nothing listens until Run.
func New(cfg *config.Config, log *slog.Logger) (*Server, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m, err := LoadModel(cfg)
	if err != nil {
		return nil, err
	}
	plan, err := Preflight(cfg, m)
	if err != nil {
		m.Close()
		return nil, err
	}
	log.Info("preflight passed", "plan", plan.String(), "kernels", kernels.Features())
	s := &Server{Config: cfg, Model: m, Metrics: metrics.New(), Log: log}
	if err := s.build(plan); err != nil {
		m.Close()
		return nil, err
	}
	return s, nil
}

// prefixQuotas is each prefix-cache namespace's block limit from the
// tenants' max_cached_blocks. Tenants in one prefix group share a
// namespace: it gets the smallest quota any of them sets, not whichever
// came last.
func prefixQuotas(cfg *config.Config) map[string]int {
	quotas := map[string]int{}
	namespace := cfg.PrefixNamespaces()
	for _, t := range cfg.Tenants {
		if ns := namespace(t.Name); t.MaxCachedBlocks > 0 {
			if q, ok := quotas[ns]; !ok || t.MaxCachedBlocks < q {
				quotas[ns] = t.MaxCachedBlocks
			}
		}
	}
	return quotas
}

func (s *Server) build(plan Plan) error {
	cfg := s.Config
	var err error
	if s.Pool, err = NewPool(cfg, s.Model, s.Metrics); err != nil {
		return err
	}
	if cfg.PrefixCache.Enabled {
		if s.Prefix, err = prefix.New(s.Pool, prefix.Config{MaxBlocks: cfg.PrefixCache.MaxBlocks, NamespaceBlocks: prefixQuotas(cfg)}); err != nil {
			return err
		}
	}
	if s.Engine, s.threads, err = NewEngine(cfg, s.Model, s.Pool, s.Metrics, plan.Limits, s.Prefix); err != nil {
		return err
	}
	s.API, err = api.New(api.Options{
		Backend: s.Engine, Tokenizer: s.Model.Tokenizer, ModelName: s.Model.Name,
		ChatTemplate: s.Model.ChatTemplate, Auth: cfg.Auth, Tenants: cfg.Tenants,
		Metrics: s.Metrics, NoMetrics: !cfg.MetricsOnAPI(), Logger: s.Log, MaxBodyBytes: cfg.MaxBodyBytes, Ready: s.ready.Load,
	})
	if err != nil {
		s.threads.Close()
		return err
	}
	return nil
}

// ReadTimeout bounds reading one whole request, headers and body, when
// max_body_bytes is at most MinBodyRate × ReadTimeout (a larger limit
// gets proportionally longer). Without it a client that sends its headers
// and then trickles the body (or never sends the Content-Length it
// announced) holds a connection and a goroutine for ever; even a 401 does
// not free it, since net/http reads the unread body after the handler
// returns. It bounds reads only: a response streams for as long as it
// takes.
const ReadTimeout = time.Minute

// MinBodyRate is the slowest upload, in bytes per second, that a request
// body of max_body_bytes may take and still arrive within the read
// timeout.
const MinBodyRate = 16 << 10

// readTimeout is ReadTimeout; tests shorten it.
var readTimeout = ReadTimeout

// ReadTimeoutFor is the read timeout for bodies up to maxBody bytes; the
// router's API server uses it too.
func ReadTimeoutFor(maxBody int64) time.Duration {
	return max(readTimeout, time.Duration(maxBody/MinBodyRate)*time.Second)
}

// failGrace bounds how long Run waits, once the drain time is over and
// the engine has failed what was left, for handlers to write those errors.
const failGrace = 2 * time.Second

// Run serves HTTP on ln until ctx ends, then shuts down gracefully: it
// stops accepting, marks itself not ready, lets in-flight requests finish
// for up to drain, fails whatever is left, and returns.
func (s *Server) Run(ctx context.Context, ln net.Listener, drain time.Duration) error {
	engineCtx, stopEngine := context.WithCancel(context.Background())
	engineDone := make(chan error, 1)
	go func() { engineDone <- s.Engine.Run(engineCtx) }()
	defer func() {
		stopEngine()
		<-engineDone
		s.threads.Close()
		s.Model.Close()
	}()

	gaugesDone := make(chan struct{})
	// Not ctx: the drain after ctx ends is when an operator watches the
	// pages come back, so the gauges run until Run returns.
	gaugesCtx, stopGauges := context.WithCancel(context.Background())
	go func() {
		defer close(gaugesDone)
		UpdateGauges(gaugesCtx, s.Pool, s.Metrics)
	}()
	defer func() { stopGauges(); <-gaugesDone }()

	srv := &http.Server{Handler: s.API, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: ReadTimeoutFor(s.Config.MaxBodyBytes),
		IdleTimeout: 2 * time.Minute, ErrorLog: slog.NewLogLogger(s.Log.Handler(), slog.LevelWarn)}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	s.ready.Store(true)
	s.Log.Info("serving", "addr", ln.Addr().String(), "model", s.Model.Name)

	changed, stopWatch := WatchModel(s.Model, s.ModelCheckEvery)
	defer stopWatch() // runs before the deferred Model.Close above
	servedErr, modelErr, drain := AwaitStop(ctx, served, changed, s.Log, drain)
	s.ready.Store(false)
	if servedErr != nil {
		return servedErr
	}
	s.Log.Info("shutting down", "drain", drain.String())
	sctx, cancel := context.WithTimeout(context.Background(), drain)
	defer cancel()
	err := srv.Shutdown(sctx)
	if errors.Is(err, context.DeadlineExceeded) {
		// Requests still running past the drain time are failed by the
		// engine's shutdown (a clean error, never a truncated success).
		// Their handlers need a moment to write that error: closing the
		// connections at once would cut every stream mid-chunk instead.
		stopEngine()
		gctx, gcancel := context.WithTimeout(context.Background(), failGrace)
		if srv.Shutdown(gctx) != nil {
			srv.Close() // a client that does not read its error is cut off
		}
		gcancel()
		err = nil
	}
	<-served
	if modelErr != nil {
		return modelErr
	}
	return err
}

// MetricsServer returns an HTTP server for the operator-only listener of
// metrics_listen: GET /metrics from m, /health, and nothing else. Nothing
// on it reads a request body, so its read timeout is short.
func MetricsServer(m *metrics.Metrics, log *slog.Logger) *http.Server {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", m.Handler())
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	return &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		IdleTimeout: 2 * time.Minute, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
}
