package api

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/chat"
	"github.com/bulkhead-llm/bulkhead/internal/config"
	"github.com/bulkhead-llm/bulkhead/internal/engine"
	"github.com/bulkhead-llm/bulkhead/internal/errkind"
	"github.com/bulkhead-llm/bulkhead/internal/metrics"
	"github.com/bulkhead-llm/bulkhead/internal/tokenizer"
)

// Options configure a Server.
type Options struct {
	// Backend runs admitted requests (required).
	Backend engine.Backend
	// Tokenizer encodes prompts and decodes outputs (required).
	Tokenizer *tokenizer.Tokenizer
	// ModelName is the id clients must send as "model" (required).
	ModelName string
	// ChatTemplate is the model's Jinja chat template; empty uses
	// chat.Builtin.
	ChatTemplate string
	// Auth is config.AuthNone or config.AuthAPIKey; empty means AuthAPIKey
	// when Tenants is non-empty and AuthNone otherwise.
	Auth string
	// Tenants map API keys to tenants under AuthAPIKey.
	Tenants []config.Tenant
	// Metrics receives request metrics; nil creates a private set.
	Metrics *metrics.Metrics
	// NoMetrics keeps /metrics off this handler (a 404, as any unknown
	// path). It names every tenant's traffic, so a multi-tenant
	// deployment serves it on an operator-only listener instead.
	NoMetrics bool
	// Logger receives one line per request (never content or keys); nil
	// discards.
	Logger *slog.Logger
	// MaxBodyBytes bounds request bodies; 0 uses config.DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// Ready reports whether the server can take traffic (GET /ready); nil
	// means always.
	Ready func() bool
}

// Server is the HTTP API. It is an http.Handler and safe for concurrent
// use.
type Server struct {
	opts     Options
	backend  engine.Backend
	tok      *tokenizer.Tokenizer
	tmpl     *chat.Template
	specials []string
	bosText  string
	metrics  *metrics.Metrics
	log      *slog.Logger
	noAuth   bool
	keys     []keyEntry
	created  int64
	mux      *http.ServeMux
}

// keyEntry holds a key's SHA-256, never the key: comparing fixed-length
// digests in constant time reveals neither the key's length nor which
// byte differed.
type keyEntry struct {
	digest [sha256.Size]byte
	tenant string
}

// New builds a Server. It fails when a required option is missing, the
// auth settings contradict each other, or the chat template does not
// compile.
func New(opts Options) (*Server, error) {
	switch {
	case opts.Backend == nil:
		return nil, errors.New("api: Options.Backend is nil")
	case opts.Tokenizer == nil:
		return nil, errors.New("api: Options.Tokenizer is nil")
	case opts.ModelName == "":
		return nil, errors.New("api: Options.ModelName is empty")
	}
	s := &Server{opts: opts, backend: opts.Backend, tok: opts.Tokenizer, metrics: opts.Metrics, log: opts.Logger, created: time.Now().Unix()}
	if s.metrics == nil {
		s.metrics = metrics.New()
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.opts.MaxBodyBytes <= 0 {
		s.opts.MaxBodyBytes = config.DefaultMaxBodyBytes
	}
	auth := opts.Auth
	if auth == "" {
		auth = config.AuthNone
		if len(opts.Tenants) > 0 {
			auth = config.AuthAPIKey
		}
	}
	switch auth {
	case config.AuthNone:
		if len(opts.Tenants) > 0 {
			return nil, errors.New("api: auth is none but tenants are configured")
		}
		s.noAuth = true
	case config.AuthAPIKey:
		if len(opts.Tenants) == 0 {
			return nil, errors.New("api: auth is api_key but no tenants are configured")
		}
		for _, t := range opts.Tenants {
			for _, k := range t.APIKeys {
				if k == "" {
					return nil, fmt.Errorf("api: tenant %q has an empty API key", t.Name)
				}
				s.keys = append(s.keys, keyEntry{digest: sha256.Sum256([]byte(k)), tenant: t.Name})
			}
		}
	default:
		return nil, fmt.Errorf("api: unknown auth mode %q", auth)
	}
	s.specials = specialTexts(s.tok)
	if bos := s.tok.BOS(); bos >= 0 {
		s.bosText = string(s.tok.Piece(bos))
	}
	eos := ""
	if id := s.tok.EOS(); id >= 0 {
		eos = string(s.tok.Piece(id))
	}
	tmpl, err := chat.New(chat.Options{Source: opts.ChatTemplate, BOS: s.bosText, EOS: eos, Specials: s.specials})
	if err != nil {
		return nil, fmt.Errorf("api: %w", err)
	}
	s.tmpl = tmpl
	s.mux = http.NewServeMux()
	s.mux.HandleFunc("/v1/models", s.api(http.MethodGet, s.handleModels))
	s.mux.HandleFunc("/v1/models/{id...}", s.api(http.MethodGet, s.handleModel))
	s.mux.HandleFunc("/v1/completions", s.api(http.MethodPost, s.handleCompletions))
	s.mux.HandleFunc("/v1/chat/completions", s.api(http.MethodPost, s.handleChat))
	s.mux.HandleFunc("/health", s.handleHealth)
	s.mux.HandleFunc("/ready", s.handleReady)
	if !opts.NoMetrics {
		s.mux.Handle("/metrics", s.metrics.Handler())
	}
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.writeError(w, r, errkind.New(errkind.NotFound, "not_found", "no route %s %s", r.Method, r.URL.Path))
	})
	return s, nil
}

// specialTexts lists the text of every control and user-defined token: the
// strings that EncodeSpecial would turn into ids.
func specialTexts(t *tokenizer.Tokenizer) []string {
	var out []string
	for id := 0; id < t.VocabSize(); id++ {
		if ty := t.Type(id); ty == tokenizer.TypeControl || ty == tokenizer.TypeUserDefined {
			if p := t.Piece(id); len(p) > 0 {
				out = append(out, string(p))
			}
		}
	}
	return out
}

// ServeHTTP routes a request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// call is one API request's bookkeeping.
type call struct {
	tenant     string
	start      time.Time
	promptToks int
	genToks    int
}

// recorder remembers the status written, for metrics and logs, and keeps
// streaming working (Flush, Unwrap for http.ResponseController).
type recorder struct {
	http.ResponseWriter
	status int
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

func (r *recorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

type apiHandler func(w http.ResponseWriter, r *http.Request, c *call)

// api wraps an endpoint: method check, body limit, authentication,
// metrics and one log line.
func (s *Server) api(method string, h apiHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		c := &call{start: time.Now()}
		rec := &recorder{ResponseWriter: w}
		defer func() {
			status := rec.status
			if status == 0 {
				status = http.StatusOK
			}
			s.metrics.ObserveRequest(c.tenant, status)
			s.log.InfoContext(r.Context(), "request", "method", r.Method, "path", r.URL.Path, "status", status,
				"tenant", c.tenant, "prompt_tokens", c.promptToks, "completion_tokens", c.genToks,
				"duration_ms", time.Since(c.start).Milliseconds())
		}()
		if r.Method != method {
			rec.Header().Set("Allow", method)
			s.writeError(rec, r, errkind.New(errkind.BadInput, codeMethodNotAllowed, "%s %s is not allowed; use %s", r.Method, r.URL.Path, method))
			return
		}
		tenant, err := s.authenticate(r)
		if err != nil {
			s.writeError(rec, r, err)
			return
		}
		c.tenant = tenant
		r.Body = http.MaxBytesReader(rec, r.Body, s.opts.MaxBodyBytes)
		h(rec, r, c)
	}
}

// authenticate maps the bearer key to its tenant. Every configured key is
// compared, whatever matched, so the time taken does not depend on which
// tenant (if any) the key belongs to.
func (s *Server) authenticate(r *http.Request) (string, *errkind.Error) {
	if s.noAuth {
		return config.LocalTenant, nil
	}
	h := r.Header.Get("Authorization")
	scheme, key, ok := strings.Cut(h, " ")
	if h == "" {
		return "", errkind.New(errkind.Auth, "missing_api_key", "no API key: send the header Authorization: Bearer YOUR_KEY")
	}
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(key) == "" {
		return "", errkind.New(errkind.Auth, "invalid_api_key", "the Authorization header must be \"Bearer YOUR_KEY\"")
	}
	d := sha256.Sum256([]byte(strings.TrimSpace(key)))
	found := -1
	for i := range s.keys {
		eq := subtle.ConstantTimeCompare(d[:], s.keys[i].digest[:])
		// Select without branching on the secret comparison.
		found = subtle.ConstantTimeSelect(eq&subtle.ConstantTimeEq(int32(found), -1), i, found)
	}
	if found < 0 {
		return "", errkind.New(errkind.Auth, "invalid_api_key", "the API key is not valid")
	}
	return s.keys[found].tenant, nil
}

func (s *Server) handleModels(w http.ResponseWriter, r *http.Request, c *call) {
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []map[string]any{s.modelObject()}})
}

// handleModel is GET /v1/models/{id}, which clients call to check that a
// model exists before using it.
func (s *Server) handleModel(w http.ResponseWriter, r *http.Request, c *call) {
	if id := r.PathValue("id"); id != s.opts.ModelName {
		s.writeError(w, r, &errkind.Error{Kind: errkind.NotFound, Code: "model_not_found", Param: "model", Message: s.notServed(id)})
		return
	}
	writeJSON(w, http.StatusOK, s.modelObject())
}

// modelObject is OpenAI's model object, plus max_model_len: the longest
// prompt and completion together this server takes now, under the name
// vLLM and SGLang give it, so that clients that size requests from it
// (and bulkhead audit) need not be told. Behind a router it follows the
// live peers.
func (s *Server) modelObject() map[string]any {
	o := map[string]any{"id": s.opts.ModelName, "object": "model", "created": s.created, "owned_by": "bulkhead"}
	if n := s.backend.Limits().ContextLen; n > 0 {
		o["max_model_len"] = n
	}
	return o
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	if s.opts.Ready != nil && !s.opts.Ready() {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not ready"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// checkModel refuses a request for a model this server does not serve.
func (s *Server) checkModel(model string) *errkind.Error {
	switch model {
	case s.opts.ModelName:
		return nil
	case "":
		return badInput("model", "missing_required_parameter", "model is required; this server serves %q", s.opts.ModelName)
	}
	return badInput("model", "model_not_found", "%s", s.notServed(model))
}

// notServed says that model is not served here, with at most 64 bytes of
// the name the client sent: the message echoes it, and a path or body may
// carry megabytes.
func (s *Server) notServed(model string) string {
	if len(model) > 64 {
		model = model[:64] + "..."
	}
	return fmt.Sprintf("model %q is not served here; this server serves %q", model, s.opts.ModelName)
}
