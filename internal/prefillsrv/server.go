package prefillsrv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/config"
	"github.com/bulkhead-llm/bulkhead/internal/engine"
	"github.com/bulkhead-llm/bulkhead/internal/errkind"
	"github.com/bulkhead-llm/bulkhead/internal/kernels"
	"github.com/bulkhead-llm/bulkhead/internal/kv"
	"github.com/bulkhead-llm/bulkhead/internal/metrics"
	"github.com/bulkhead-llm/bulkhead/internal/model"
	"github.com/bulkhead-llm/bulkhead/internal/peerapi"
	"github.com/bulkhead-llm/bulkhead/internal/peerauth"
	"github.com/bulkhead-llm/bulkhead/internal/server"
	"github.com/bulkhead-llm/bulkhead/internal/transfer"
	"github.com/prometheus/client_golang/prometheus"
)

// Options tune a prefill server beyond its configuration.
type Options struct {
	// Auth overrides the credentials of cfg.Peers (tests).
	Auth *peerauth.Auth
	// Faults are injected on every frame written to decode servers
	// (--faults); the zero spec injects nothing.
	Faults transfer.FaultSpec
	// Drain is how long in-flight requests may take to finish on shutdown
	// (default 30s).
	Drain time.Duration
	// TickEvery paces the Sender's clock (lease, retransmission); default
	// 20ms.
	TickEvery time.Duration
	// Retry is the Sender's retransmission interval; 0: transfer.DefaultRetry.
	Retry time.Duration
	// ModelCheckEvery is how often the model file is checked for writes
	// in place (server.WatchModel); 0: server.ModelCheckEvery.
	ModelCheckEvery time.Duration
}

// Server is an assembled prefill server.
type Server struct {
	Model   *model.Model
	Pool    *kv.Pool
	Engine  *engine.Engine
	Metrics *metrics.Metrics

	cfg     *config.Config
	log     *slog.Logger
	opts    Options
	auth    *peerauth.Auth
	limits  engine.Limits
	threads *kernels.Pool
	tm      *server.TransferMetrics
	ready   atomic.Bool
	sending atomic.Int64
	body    int64 // the largest prefill body read (server.PromptBodyLimit)

	mu     sync.Mutex
	active map[transfer.ID]context.CancelFunc
}

// New loads the model, runs preflight and builds the pool and engine.
// It refuses to build without peer authentication. Nothing listens until
// Run.
func New(cfg *config.Config, log *slog.Logger, opts Options) (*Server, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	auth := opts.Auth
	if auth == nil {
		var err error
		if auth, err = peerauth.Load(cfg.Peers); err != nil {
			return nil, err
		}
	}
	if err := auth.ActAs(peerauth.RolePrefill); err != nil {
		return nil, err
	}
	if opts.Drain <= 0 {
		opts.Drain = 30 * time.Second
	}
	if opts.TickEvery <= 0 {
		opts.TickEvery = 20 * time.Millisecond
	}
	m, lim, err := server.LoadAndPreflight(cfg)
	if err != nil {
		return nil, err
	}
	s := &Server{Model: m, Metrics: metrics.New(), cfg: cfg, log: log, opts: opts, auth: auth, limits: lim,
		active: map[transfer.ID]context.CancelFunc{}, body: server.PromptBodyLimit(cfg.MaxBodyBytes, lim.MaxInputTokens, m.Config.Vocab)}
	if s.Pool, err = server.NewPool(cfg, m, s.Metrics, server.SealKV); err != nil {
		m.Close()
		return nil, err
	}
	if s.Engine, s.threads, err = server.NewEngine(cfg, m, s.Pool, s.Metrics, lim, nil); err != nil {
		m.Close()
		return nil, err
	}
	s.tm = server.NewTransferMetrics(s.Metrics, "KV transfers acknowledged by decode.",
		"kv_transfer_bytes_sent_total", "Bytes written to KV transfer connections, retransmissions included.")
	s.tm.CountChecksums(s.Metrics)
	s.Metrics.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: metrics.Namespace,
		Name: "kv_transfers_in_progress", Help: "KV transfers being sent now."},
		func() float64 { return float64(s.sending.Load()) }))
	// The key prefix decode logs when it refuses a transfer's frames as
	// another prefill's ("wrong prefill"; the sender itself hears only
	// transfer_unknown_id), so an operator can tell which process was
	// expected and which presented itself.
	log.Info("prefill server built", "model", m.Name, "limits", fmt.Sprintf("%+v", lim), "peer_auth", auth.Mode(),
		"peer_key", transfer.Identity(auth.Identity()).Short())
	return s, nil
}

// Limits are this server's own admission limits.
func (s *Server) Limits() engine.Limits { return s.limits }

// Run serves the control API on controlLn (from the server's
// peerauth.ListenHTTP) until ctx ends, then shuts down gracefully: it stops
// accepting, lets prefills and transfers in progress finish for up to
// Options.Drain, then cancels what is left (each transfer ends with an
// ABORT and its lease released).
func (s *Server) Run(ctx context.Context, controlLn net.Listener) error {
	engineCtx, stopEngine := context.WithCancel(context.Background())
	engineDone := make(chan error, 1)
	go func() { engineDone <- s.Engine.Run(engineCtx) }()
	gaugeCtx, stopGauges := context.WithCancel(context.Background())
	gaugesDone := make(chan struct{})
	go func() { defer close(gaugesDone); server.UpdateGauges(gaugeCtx, s.Pool, s.Metrics) }()

	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: server.ReadTimeoutFor(s.body), IdleTimeout: 2 * time.Minute,
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(controlLn) }()
	s.ready.Store(true)
	s.log.Info("prefill serving", "control", controlLn.Addr().String())

	changed, stopWatch := server.WatchModel(s.Model, s.opts.ModelCheckEvery)
	defer stopWatch()
	err, modelErr, drain := server.AwaitStop(ctx, served, changed, s.log, s.opts.Drain)
	s.ready.Store(false)
	if err == nil {
		sctx, cancel := context.WithTimeout(context.Background(), drain)
		err = srv.Shutdown(sctx)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			s.cancelAll()
			srv.Close()
			err = nil
		}
		<-served
	}
	s.cancelAll()
	stopEngine()
	<-engineDone
	stopGauges()
	<-gaugesDone
	s.threads.Close()
	stopWatch() // before the model it reads goes
	s.Model.Close()
	if modelErr != nil {
		return modelErr
	}
	return err
}

func (s *Server) cancelAll() {
	s.mu.Lock()
	for _, c := range s.active {
		c()
	}
	s.mu.Unlock()
}

// Handler is the control API: the peer endpoints, which only the router
// calls, behind peer authentication as the router; /metrics behind peer
// authentication of any role (it names every tenant's traffic; an
// operator's scraper without a peer certificate uses metrics_listen); and
// /health and /ready without it, for load-balancer probes (they say "ok",
// "ready" or "not ready" and nothing else).
func (s *Server) Handler() http.Handler {
	peer := http.NewServeMux()
	peer.HandleFunc("GET "+peerapi.PathInfo, func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, s.Info()) })
	peer.HandleFunc("POST "+peerapi.PathPrefill, s.handlePrefill)
	peer.HandleFunc("POST "+peerapi.PathCancel, s.handleCancel)
	mux := http.NewServeMux()
	mux.Handle("/peer/", s.auth.HTTPHandler(peer, peerauth.RoleRouter))
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /ready", func(w http.ResponseWriter, r *http.Request) {
		if !s.ready.Load() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	mux.Handle("GET /metrics", s.auth.HTTPHandler(s.Metrics.Handler(), peerauth.Roles()...))
	return mux
}

// Info describes this server for the router's handshake and health checks.
func (s *Server) Info() peerapi.Info {
	st := s.Engine.Stats()
	return peerapi.Info{
		Role: "prefill", Protocol: peerapi.Protocol, Model: s.Model.Name, Fingerprint: s.Model.Fingerprint(),
		Layers: s.Model.Config.Layers, KVDim: s.Model.Config.KVDim(), KVType: s.Pool.Config().Type.String(), PageSize: s.cfg.KV.PageSize, Limits: s.limits,
		TenantTokens: server.TenantTokens(s.Pool),
		Load:         peerapi.Load{Running: st.Running, Queued: st.Queued, FreePages: s.Pool.Stats().Free, Transfers: int(s.sending.Load())},
	}
}

func (s *Server) handleCancel(w http.ResponseWriter, r *http.Request) {
	var req peerapi.CancelRequest
	if err := readJSON(w, r, s.cfg.MaxBodyBytes, &req); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": peerapi.FromError(err)})
		return
	}
	known := false
	if id, err := transfer.ParseID(req.ID); err == nil {
		s.mu.Lock()
		if c, ok := s.active[id]; ok {
			known = true
			c()
		}
		s.mu.Unlock()
	}
	writeJSON(w, http.StatusOK, peerapi.CancelResult{Known: known})
}

func readJSON(w http.ResponseWriter, r *http.Request, limit int64, v any) error {
	if limit <= 0 {
		limit = 1 << 20
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit))
	dec.DisallowUnknownFields() // a router newer than this server: refuse what it cannot honour
	if err := dec.Decode(v); err != nil {
		return errkind.Wrap(errkind.BadInput, "invalid_request", err, fmt.Sprintf("the request body is not valid JSON for %s: %v", r.URL.Path, err))
	}
	return nil
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}
