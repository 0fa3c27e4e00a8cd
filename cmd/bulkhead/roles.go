package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/config"
	"github.com/bulkhead-llm/bulkhead/internal/decodesrv"
	"github.com/bulkhead-llm/bulkhead/internal/peerauth"
	"github.com/bulkhead-llm/bulkhead/internal/prefillsrv"
	"github.com/bulkhead-llm/bulkhead/internal/transfer"
)

func init() {
	register("prefill", "run a prefill server of a disaggregated deployment (peer control API; KV sent to decode servers)", runPrefill)
	register("decode", "run a decode server of a disaggregated deployment (peer control API and KV transfer listener)", runDecode)
	register("certs", "make a private CA and a node certificate, for one role, for mutual-TLS peers", runCerts)
}

// roleMetricsUsage is the --metrics-listen flag's help for prefill and
// decode, whose control listener serves /metrics only to peers.
const roleMetricsUsage = "also serve /metrics over plain HTTP on this address, without a peer certificate, for the operator's scraper (overrides metrics_listen; keep it off networks tenants reach). The control listener serves /metrics only to clients with a peer certificate (on decode, only the router's)"

// roleSetup is what prefill and decode share: config (with the --listen
// and --metrics-listen overrides), peer credentials and faults.
func roleSetup(cfgPath, faults, listen, metricsListen string) (*config.Config, *peerauth.Auth, transfer.FaultSpec, error) {
	spec, err := transfer.ParseFaults(faults)
	if err != nil {
		return nil, nil, spec, usagef("--faults: %v", err)
	}
	cfg, err := loadConfig(cfgPath, "")
	if err != nil {
		return nil, nil, spec, err
	}
	if listen != "" {
		cfg.Listen = listen
	}
	if metricsListen != "" {
		cfg.MetricsListen = metricsListen
	}
	auth, err := peerauth.Load(cfg.Peers)
	if err != nil {
		return nil, nil, spec, err
	}
	return cfg, auth, spec, nil
}

func runPrefill(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("prefill")
	cfgPath := fs.String("config", "", "YAML configuration file; its peers section must set up peer authentication")
	listen := fs.String("listen", "", "control API listen address (default: the config's listen)")
	metricsListen := fs.String("metrics-listen", "", roleMetricsUsage)
	faults := fs.String("faults", "", "inject faults on the KV frames this server writes, e.g. drop=0.01,corrupt=0.001,kill=frame:12,seed=7 (testing only)")
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
	cfg, auth, spec, err := roleSetup(*cfgPath, *faults, *listen, *metricsListen)
	if err != nil {
		return err
	}
	ln, mln, err := lf.bind(cfg, func(a string) (net.Listener, error) { return auth.ListenHTTP("tcp", a) })
	if err != nil {
		return err
	}
	defer closeListeners(ln, mln)
	log := newLogger(cfg.LogLevel, stderr)
	srv, err := prefillsrv.New(cfg, log, prefillsrv.Options{Auth: auth, Faults: spec, Drain: *drain})
	if err != nil {
		return err
	}
	defer serveMetrics(mln, srv.Metrics, stdout, log)()
	if spec != (transfer.FaultSpec{}) {
		log.Warn("fault injection is on", "faults", spec.String())
	}
	fmt.Fprintf(stdout, "bulkhead: prefill control on %s\n", ln.Addr())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return srv.Run(ctx, ln)
}

func runDecode(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("decode")
	cfgPath := fs.String("config", "", "YAML configuration file; its peers section must set up peer authentication")
	listen := fs.String("listen", "", "control API listen address (default: the config's listen)")
	metricsListen := fs.String("metrics-listen", "", roleMetricsUsage)
	kvListen := fs.String("kv-listen", "127.0.0.1:0", "KV transfer listen address")
	kvAdvertise := fs.String("kv-advertise", "", "KV address to tell the router (default: the bound --kv-listen address)")
	faults := fs.String("faults", "", "inject faults on the KV frames this server writes, e.g. drop=0.01,corrupt=0.001,kill=frame:12,seed=7 (testing only)")
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
	if err := checkListenFlag("--kv-listen", *kvListen); err != nil {
		return err
	}
	cfg, auth, spec, err := roleSetup(*cfgPath, *faults, *listen, *metricsListen)
	if err != nil {
		return err
	}
	ln, mln, err := lf.bind(cfg, func(a string) (net.Listener, error) { return auth.ListenHTTP("tcp", a) })
	if err != nil {
		return err
	}
	defer closeListeners(ln, mln)
	// Only prefill servers open KV streams: a router's or another decode
	// server's certificate fails the handshake.
	kln, err := bindAddr("--kv-listen", *kvListen, func(a string) (net.Listener, error) { return auth.Listen("tcp", a, peerauth.RolePrefill) })
	if err != nil {
		return err
	}
	defer kln.Close()
	log := newLogger(cfg.LogLevel, stderr)
	srv, err := decodesrv.New(cfg, log, decodesrv.Options{Auth: auth, Faults: spec, Drain: *drain, KVAdvertise: *kvAdvertise})
	if err != nil {
		return err
	}
	defer serveMetrics(mln, srv.Metrics, stdout, log)()
	if spec != (transfer.FaultSpec{}) {
		log.Warn("fault injection is on", "faults", spec.String())
	}
	fmt.Fprintf(stdout, "bulkhead: decode control on %s kv on %s\n", ln.Addr(), kln.Addr())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return srv.Run(ctx, ln, kln)
}

// checkCertHost refuses a --hosts entry that is neither an IP address nor
// a DNS name: the certificate would be issued anyway, valid for no address
// a peer can dial, and the mistake would show only as failed handshakes.
// "999.1.1.1" is refused as a bad address, not taken for a name; a leading
// "*." wildcard label is allowed, as TLS matches it.
func checkCertHost(h string) error {
	if net.ParseIP(h) != nil {
		return nil
	}
	if strings.HasPrefix(h, "[") || strings.Contains(h, ":") {
		return fmt.Errorf("%q: give a bare IP address or DNS name, without brackets, port or scheme", h)
	}
	name := strings.TrimSuffix(strings.TrimPrefix(h, "*."), ".")
	labels := strings.Split(name, ".")
	if len(h) > 253 {
		return fmt.Errorf("%q: a DNS name is at most 253 characters", h)
	}
	allDigits := true
	for _, l := range labels {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return fmt.Errorf("%q is not a DNS name: each dot-separated label needs 1 to 63 characters and may not start or end with '-'", h)
		}
		for _, c := range []byte(l) {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return fmt.Errorf("%q is not an IP address or DNS name: %q is not allowed in one", h, c)
			}
		}
		allDigits = allDigits && strings.Trim(l, "0123456789") == ""
	}
	if allDigits {
		return fmt.Errorf("%q is not a valid IP address", h)
	}
	return nil
}

func runCerts(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("certs")
	out := fs.String("out", "", "directory to write the certificates into (required)")
	hosts := fs.String("hosts", "127.0.0.1,localhost", "comma-separated IP addresses and DNS names the node certificate is valid for")
	caDir := fs.String("ca", "", "directory holding an existing ca.pem and ca-key.pem to sign with (default: make a new CA in --out)")
	role := fs.String("role", "", "the one role the certificate's holder may act as: router, prefill or decode (required)")
	name := fs.String("name", "", "node certificate name: writes NAME.pem and NAME-key.pem (default: the role)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *out == "" {
		return usagef("--out is required")
	}
	// No default role: whichever one it were, a certificate issued for a
	// machine that runs another would be accepted where it must not be,
	// or refused where it must work.
	if *role == "" {
		return usagef("--role is required: router, prefill or decode. Each peer certificate names the one role its holder may act as; a decode server accepts reservations only from a router certificate and KV only from a prefill certificate")
	}
	r, err := peerauth.ParseRole(*role)
	if err != nil {
		return usagef("--role: %v", err)
	}
	if *name == "" {
		*name = string(r)
	}
	var hs []string
	for _, h := range strings.Split(*hosts, ",") {
		if h = strings.TrimSpace(h); h != "" {
			if err := checkCertHost(h); err != nil {
				return usagef("--hosts: %v", err)
			}
			hs = append(hs, h)
		}
	}
	if len(hs) == 0 {
		return usagef("--hosts %q names no host; list the IP addresses and DNS names the certificate is for", *hosts)
	}
	ca := *caDir
	if ca == "" {
		if err := peerauth.MakeCA(*out); err != nil {
			return err
		}
		ca = *out
	}
	p, err := peerauth.IssueNode(ca, *out, *name, r, hs)
	if err != nil {
		if *caDir == "" {
			// The CA was made a moment ago for this certificate: remove
			// it, or a corrected rerun would refuse to make a CA over it.
			os.Remove(filepath.Join(ca, peerauth.CAKeyFile))
			os.Remove(filepath.Join(ca, peerauth.CAFile))
		}
		return err
	}
	if *caDir == "" {
		fmt.Fprintf(stdout, "bulkhead: made a CA (valid one year) in %s; keep %s on this machine\n", *out, peerauth.CAKeyFile)
	}
	fmt.Fprintf(stdout, "bulkhead: wrote node certificate %q, role %s, for %s (valid one year) to %s\n", *name, r, strings.Join(hs, ", "), *out)
	fmt.Fprintf(stdout, "peers:\n  auth: mtls\n  ca: %s\n  cert: %s\n  key: %s\n", p.CA, p.Cert, p.Key)
	return nil
}
