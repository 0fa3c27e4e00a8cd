package decodesrv

import (
	"context"
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

// Options tune a decode server beyond its configuration.
type Options struct {
	// Auth overrides the credentials of cfg.Peers (tests).
	Auth *peerauth.Auth
	// Faults are injected on every frame the KV connections write
	// (--faults); the zero spec injects nothing.
	Faults transfer.FaultSpec
	// Drain is how long in-flight requests may take to finish on shutdown
	// (default 30s).
	Drain time.Duration
	// KVAdvertise is the KV address Info reports; empty: the address the
	// KV listener is bound to.
	KVAdvertise string
	// TickEvery paces the Table's clock (lease deadlines); default 50ms.
	TickEvery time.Duration
	// ModelCheckEvery is how often the model file is checked for writes
	// in place (server.WatchModel); 0: server.ModelCheckEvery.
	ModelCheckEvery time.Duration
}

// Server is an assembled decode server.
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
	// framesRefused counts frames of types a prefill may not send,
	// refused on KV connections (fromPrefill), by type.
	framesRefused *prometheus.CounterVec
	// sendersRefused counts frames refused because their KV connection
	// presented another prefill than the one the transfer was reserved
	// for (transfer.SenderRefused).
	sendersRefused prometheus.Counter
	// senderLog bounds how often wrongSender logs (loop only).
	senderLog logBudget
	ready     atomic.Bool
	kvAddr    atomic.Value // string
	body      int64        // the largest generate body read (server.PromptBodyLimit)

	layers int
	kvDim  int // storage words per token per layer (kv.PoolConfig.RowWords)
	start  time.Time

	// The loop's state: touched only on the loop goroutine.
	table *transfer.Table
	res   map[transfer.ID]*reservation
	conns map[uint64]*kvConn

	cmds     chan func()
	loopDone chan struct{}
	// kvClosing (loop only): shutdown is closing the KV connections, so
	// one that registers from now on is closed once flushed too.
	kvClosing bool
	kvWG      sync.WaitGroup
	nextPeer  atomic.Uint64
	nextReq   atomic.Uint64
	live      atomic.Int64 // table.Live(), for Info and metrics

	mu     sync.Mutex
	active map[transfer.ID]activeRequest // generate requests in progress

	slots *tenantSlots // max_concurrent_requests, counted from reservation
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
	if err := auth.ActAs(peerauth.RoleDecode); err != nil {
		return nil, err
	}
	if opts.Drain <= 0 {
		opts.Drain = 30 * time.Second
	}
	if opts.TickEvery <= 0 {
		opts.TickEvery = 50 * time.Millisecond
	}
	m, lim, err := server.LoadAndPreflight(cfg)
	if err != nil {
		return nil, err
	}
	s := &Server{
		Model: m, Metrics: metrics.New(), cfg: cfg, log: log, opts: opts, auth: auth, limits: lim,
		layers: m.Config.Layers, start: time.Now(),
		table: transfer.NewTable(transfer.TableConfig{}), res: map[transfer.ID]*reservation{}, conns: map[uint64]*kvConn{},
		cmds: make(chan func(), 256), loopDone: make(chan struct{}), active: map[transfer.ID]activeRequest{},
		slots: newTenantSlots(cfg.Tenants),
	}
	s.kvAddr.Store("")
	s.body = server.PromptBodyLimit(cfg.MaxBodyBytes, lim.MaxInputTokens, m.Config.Vocab)
	if s.Pool, err = server.NewPool(cfg, m, s.Metrics); err != nil {
		m.Close()
		return nil, err
	}
	// Transfers count KV in the pool's storage words, so a pair whose
	// cache types differ disagrees on OPEN's KVDim and never mixes bytes.
	s.kvDim = s.Pool.Config().RowWords()
	if s.Engine, s.threads, err = server.NewEngine(cfg, m, s.Pool, s.Metrics, lim, nil); err != nil {
		m.Close()
		return nil, err
	}
	s.tm = server.NewTransferMetrics(s.Metrics, "KV transfers received and verified (Ready).",
		"kv_transfer_bytes_received_total", "Bytes of KV transfer frames received.")
	s.Metrics.Registry.MustRegister(gaugeFunc("kv_reservations", "Live KV reservations (reserved, receiving or verifying).",
		func() float64 { return float64(s.live.Load()) }))
	// The type label is bounded: frames of unknown types never decode.
	s.framesRefused = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metrics.Namespace, Name: "kv_frames_refused_total",
		Help: "Frames of a type prefill may not send (CANCEL, RESERVE, ...) refused on KV connections, by type; each closed its connection."}, []string{"type"})
	s.Metrics.Registry.MustRegister(s.framesRefused)
	s.sendersRefused = prometheus.NewCounter(prometheus.CounterOpts{Namespace: metrics.Namespace, Name: "kv_wrong_sender_total",
		Help: "Frames refused on KV connections because the connection presented another prefill than the one the router reserved the transfer for; the transfer was left as it was."})
	s.Metrics.Registry.MustRegister(s.sendersRefused)
	log.Info("decode server built", "model", m.Name, "limits", fmt.Sprintf("%+v", lim), "peer_auth", auth.Mode())
	return s, nil
}

// Limits are this server's own admission limits.
func (s *Server) Limits() engine.Limits { return s.limits }

// Run serves the control API on controlLn and KV streams on kvLn until ctx
// ends, then shuts down gracefully: it stops accepting generate requests,
// lets the requests in flight finish for up to Options.Drain (a
// reservation still waiting for its KV keeps the KV listener open, so its
// transfer arrives and it decodes like the others, rather than failing as
// a 502 for a server that was only restarting), then cancels what is
// left, lets the KV connections deliver what is queued for them (closeKV)
// and frees everything. Both listeners should come from the server's
// peerauth: ListenHTTP, and Listen accepting only peerauth.RolePrefill
// (serveKV checks each connection's role again).
func (s *Server) Run(ctx context.Context, controlLn, kvLn net.Listener) error {
	addr := s.opts.KVAdvertise
	if addr == "" {
		addr = kvLn.Addr().String()
	}
	s.kvAddr.Store(addr)

	engineCtx, stopEngine := context.WithCancel(context.Background())
	engineDone := make(chan error, 1)
	go func() { engineDone <- s.Engine.Run(engineCtx) }()
	loopCtx, stopLoop := context.WithCancel(context.Background())
	go s.loop(loopCtx)
	gaugeCtx, stopGauges := context.WithCancel(context.Background())
	gaugesDone := make(chan struct{})
	go func() { defer close(gaugesDone); server.UpdateGauges(gaugeCtx, s.Pool, s.Metrics) }()
	acceptDone := make(chan struct{})
	go func() { defer close(acceptDone); s.acceptKV(loopCtx, kvLn) }()

	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: server.ReadTimeoutFor(s.body), IdleTimeout: 2 * time.Minute,
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(controlLn) }()
	s.ready.Store(true)
	s.log.Info("decode serving", "control", controlLn.Addr().String(), "kv", addr)

	changed, stopWatch := server.WatchModel(s.Model, s.opts.ModelCheckEvery)
	defer stopWatch()
	err, modelErr, drain := server.AwaitStop(ctx, served, changed, s.log, s.opts.Drain)
	s.ready.Store(false)
	// Reservations still waiting for KV when there is no more time for
	// it: fail them, so their generate requests answer at once and their
	// pages are freed.
	cancelReserved := func() {
		s.call(func() {
			for id := range s.res {
				s.step(transfer.Cancel{ID: id, Reason: errkind.New(errkind.Unavailable, "shutting_down", "the decode server is shutting down"), Local: true})
			}
		})
	}
	if err == nil {
		// Shutdown closes the control listener at once and waits for the
		// generate requests in flight; the KV listener stays open meanwhile,
		// since only prefill servers sending KV for those requests can use
		// it (the Table refuses every other id).
		sctx, cancel := context.WithTimeout(context.Background(), drain)
		err = srv.Shutdown(sctx)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			cancelReserved()
			stopEngine() // fails what is left with a clean error
			srv.Close()
			err = nil
		}
		<-served
	}
	kvLn.Close()
	<-acceptDone
	cancelReserved()
	s.closeKV()
	stopLoop()
	<-s.loopDone
	for id, r := range s.res { // the loop is gone: its state is ours
		r.seq.Free()
		delete(s.res, id)
	}
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

// Handler is the control API: the peer endpoints (reserve and generate,
// cancel, info), which only the router calls, behind peer authentication
// as the router, so that a prefill server's certificate cannot reserve,
// generate or cancel for any tenant; /metrics behind peer authentication
// as the router too (an operator's scraper without the router's
// certificate uses metrics_listen): it names every tenant's traffic, and
// counts what the KV listener refused (kv_wrong_sender_total), which a
// prefill must not be able to watch, since the wire tells it nothing of
// whose reservation it claimed; and /health and /ready without it, for
// load-balancer probes (they say "ok", "ready" or "not ready" and nothing
// else).
func (s *Server) Handler() http.Handler {
	peer := http.NewServeMux()
	peer.HandleFunc("GET "+peerapi.PathInfo, s.handleInfo)
	peer.HandleFunc("POST "+peerapi.PathGenerate, s.handleGenerate)
	peer.HandleFunc("POST "+peerapi.PathCancel, s.handleCancel)
	peer.HandleFunc("POST "+peerapi.PathExpect, s.handleExpect)
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
	mux.Handle("GET /metrics", s.auth.HTTPHandler(s.Metrics.Handler(), peerauth.RoleRouter))
	return mux
}

// Info describes this server for the router's handshake and health checks.
func (s *Server) Info() peerapi.Info {
	st := s.Engine.Stats()
	return peerapi.Info{
		Role: "decode", Protocol: peerapi.Protocol, Model: s.Model.Name, Fingerprint: s.Model.Fingerprint(),
		Layers: s.layers, KVDim: s.Model.Config.KVDim(), KVType: s.Pool.Config().Type.String(), PageSize: s.cfg.KV.PageSize, Limits: s.limits,
		TenantTokens: server.TenantTokens(s.Pool),
		KVAddr:       s.kvAddr.Load().(string),
		Load:         peerapi.Load{Running: st.Running, Queued: st.Queued, FreePages: s.Pool.Stats().Free, Transfers: int(s.live.Load())},
	}
}

func (s *Server) handleInfo(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.Info())
}

func (s *Server) handleCancel(w http.ResponseWriter, r *http.Request) {
	var req peerapi.CancelRequest
	if err := readJSON(w, r, s.cfg.MaxBodyBytes, &req); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": peerapi.FromError(err)})
		return
	}
	id, err := transfer.ParseID(req.ID)
	if err != nil {
		writeJSON(w, http.StatusOK, peerapi.CancelResult{Known: false})
		return
	}
	// Only the router that made a reservation may cancel it; another
	// router hears Known false, as for an id decode holds nothing for, and
	// changes nothing (the Table leaves the reservation; the request's
	// context is not touched).
	router := routerIdentity(r)
	known := false
	s.call(func() {
		if rc := s.table.Receiver(id); rc != nil && rc.Router() == router {
			known = true
		}
		s.step(transfer.Cancel{ID: id, Reason: errCancelled, Router: router})
	})
	s.mu.Lock()
	if a, ok := s.active[id]; ok && a.router == router {
		known = true
		a.cancel()
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, peerapi.CancelResult{Known: known})
}

// activeRequest is a generate request in progress: how to cancel it, and
// the router that made it, the only one that may.
type activeRequest struct {
	cancel context.CancelFunc
	router transfer.Identity
}

// routerIdentity is who sent control request r: the SHA-256 of its
// certificate's public key (peerauth.KeyIdentity), as transfer.Identity
// names prefills. Each router certificate is its own router; under psk
// every key holder is the same one. Zero without a certificate, which
// HTTPHandler never lets through.
func routerIdentity(r *http.Request) transfer.Identity {
	id, _ := peerauth.KeyIdentity(r.TLS)
	return id
}

// handleExpect names another prefill for a reservation nothing has
// opened yet (peerapi.ExpectRequest): 200 once the Table took it, 409 with
// the reason when it did not (opened already, or not live here). Only the
// router that made the reservation may rename it; to any other it is not
// live here (the same 409 as for an id decode never reserved).
func (s *Server) handleExpect(w http.ResponseWriter, r *http.Request) {
	var req peerapi.ExpectRequest
	if err := readJSON(w, r, s.cfg.MaxBodyBytes, &req); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": peerapi.FromError(err)})
		return
	}
	id, err := transfer.ParseID(req.ID)
	var sender transfer.Identity
	if err == nil {
		sender, err = transfer.ParseIdentity(req.PrefillIdentity)
	}
	if err == nil && sender.IsZero() {
		// All zeros names no prefill: taken, it would let any prefill
		// that learnt the id open the reservation (Table.Expect refuses
		// it too).
		err = errors.New("prefill identity is all zeros, which names no prefill")
	}
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": peerapi.FromError(errkind.Wrap(errkind.BadInput, "invalid_request", err, err.Error()))})
		return
	}
	err = errkind.New(errkind.Overload, "shutting_down", "the decode server is shutting down")
	router := routerIdentity(r)
	s.call(func() { err = s.table.Expect(id, router, sender) })
	if err != nil {
		writeJSON(w, http.StatusConflict, map[string]any{"error": peerapi.FromError(err)})
		return
	}
	s.log.Info("kv transfer moved to another prefill before it opened", "id", id.String(), "expected_prefill", sender.Short())
	writeJSON(w, http.StatusOK, peerapi.ExpectResult{OK: true})
}

func gaugeFunc(name, help string, f func() float64) prometheus.GaugeFunc {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: metrics.Namespace, Name: name, Help: help}, f)
}
