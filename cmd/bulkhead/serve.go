package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/config"
	"github.com/bulkhead-llm/bulkhead/internal/kernels"
	"github.com/bulkhead-llm/bulkhead/internal/server"
)

func init() {
	register("serve", "serve the OpenAI-compatible API in one process (the default command)", runServe)
	register("preflight", "check a configuration against its model and exit non-zero if it cannot serve", runPreflight)
}

// loadConfig reads --config, or the built-in defaults without one, and
// applies the flags that override it.
func loadConfig(path, modelPath string) (*config.Config, error) {
	cfg := config.Default()
	if path != "" {
		var err error
		if cfg, err = config.Load(path); err != nil {
			return nil, err
		}
	}
	if modelPath != "" {
		cfg.Model = modelPath
	}
	// Checked before any command opens them: a named pipe there would
	// hang startup, waiting for a writer, and the tokenizer is read whole.
	// --model's mistake is the command line's (a usage error); the
	// config's is the file's.
	what := "--model"
	if modelPath == "" {
		what = fmt.Sprintf("model (in %s)", path)
	}
	if err := checkInputFile(what, cfg.Model, 0); err != nil {
		if modelPath != "" {
			return nil, usageError{err: err}
		}
		return nil, err
	}
	if err := checkInputFile(fmt.Sprintf("tokenizer (in %s)", path), cfg.Tokenizer, maxTokenizerBytes); err != nil {
		return nil, err
	}
	return cfg, nil
}

// checkDrain refuses a negative --drain: it would not wait at all, as 0
// does, while reading as if it meant something else.
func checkDrain(d time.Duration) error {
	if d < 0 {
		return usagef("--drain %v: want 0 (stop at once) or a positive duration", d)
	}
	return nil
}

func newLogger(level string, w io.Writer) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l}))
}

func runServe(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("serve")
	cfgPath := fs.String("config", "", "YAML configuration file (default: the embedded model, no auth, localhost)")
	listen := fs.String("listen", "", "listen address, overriding the config (default 127.0.0.1:8080)")
	modelPath := fs.String("model", "", "model file, overriding the config")
	metricsListen := fs.String("metrics-listen", "", metricsListenUsage)
	drain := fs.Duration("drain", 30*time.Second, "on SIGTERM/SIGINT, how long in-flight requests may take to finish")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := checkDrain(*drain); err != nil {
		return err
	}
	lf := listenFlags{cfgPath: *cfgPath, listen: *listen, metrics: *metricsListen}
	if err := lf.check(); err != nil {
		return err
	}
	cfg, err := loadConfig(*cfgPath, *modelPath)
	if err != nil {
		return err
	}
	if *listen != "" {
		cfg.Listen = *listen
	}
	if *metricsListen != "" {
		cfg.MetricsListen = *metricsListen
	}
	ln, mln, err := lf.bind(cfg, netListen)
	if err != nil {
		return err
	}
	defer closeListeners(ln, mln)
	log := newLogger(cfg.LogLevel, stderr)
	for _, w := range cfg.Warnings() {
		log.Warn(w)
	}
	srv, err := server.New(cfg, log)
	if err != nil {
		return err
	}
	defer serveMetrics(mln, srv.Metrics, stdout, log)()
	fmt.Fprintf(stdout, "bulkhead: serving %s on http://%s/v1 (auth: %s)\n", srv.Model.Name, ln.Addr(), authMode(cfg))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return srv.Run(ctx, ln, *drain)
}

func authMode(cfg *config.Config) string {
	if cfg.Auth == config.AuthNone || (cfg.Auth == "" && len(cfg.Tenants) == 0) {
		return "none, single local tenant"
	}
	return fmt.Sprintf("API keys, %d tenants", len(cfg.Tenants))
}

func runPreflight(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("preflight")
	cfgPath := fs.String("config", "", "YAML configuration file to check (default: the built-in defaults)")
	modelPath := fs.String("model", "", "model file, overriding the config")
	if err := parse(fs, args); err != nil {
		return err
	}
	cfg, err := loadConfig(*cfgPath, *modelPath)
	if err != nil {
		return err
	}
	m, err := server.LoadModel(cfg)
	if err != nil {
		return err
	}
	defer m.Close()
	plan, err := server.Preflight(cfg, m)
	if err != nil {
		return err
	}
	for _, w := range cfg.Warnings() {
		fmt.Fprintln(stdout, "warning:", w)
	}
	fmt.Fprintln(stdout, "ok:", plan)
	fmt.Fprintln(stdout, "kernels:", kernels.Features())
	return nil
}
