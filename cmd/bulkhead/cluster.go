package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/config"
	"github.com/bulkhead-llm/bulkhead/internal/peerauth"
	"github.com/bulkhead-llm/bulkhead/internal/transfer"
	"go.yaml.in/yaml/v3"
)

func init() {
	register("cluster", "run a router with N prefill and M decode servers as local processes (try disaggregated mode)", runCluster)
}

// Announce lines of the prefill and decode subcommands.
var (
	prefillAnnounce = regexp.MustCompile(`^bulkhead: prefill control on (\S+)`)
	decodeAnnounce  = regexp.MustCompile(`^bulkhead: decode control on (\S+) kv on (\S+)`)
	metricsAnnounce = regexp.MustCompile(`^bulkhead: metrics on (\S+)`) // serveMetrics', before the above
)

// clusterStartWait bounds how long a child may take to announce itself.
const clusterStartWait = 60 * time.Second

// clusterStopWait is how long children get to drain after SIGTERM before
// their process groups are killed.
var clusterStopWait = 15 * time.Second

// child is one prefill or decode process of a cluster.
type child struct {
	name    string // "prefill[0]"
	cmd     *exec.Cmd
	control string
	kv      string
	metrics string        // its metrics URL, with --children-metrics
	exited  chan struct{} // closed when Wait returned
	err     error         // Wait's result, after exited
}

func runCluster(args []string, stdout, stderr io.Writer) (err error) {
	fs := newFlags("cluster")
	cfgPath := fs.String("config", "", "YAML configuration file: model, tenants, limits, kv (default: the embedded model, no auth); its peers section is replaced")
	listen := fs.String("listen", "", "the router's listen address, overriding the config (default 127.0.0.1:8080)")
	metricsListen := fs.String("metrics-listen", "", "the router's "+metricsListenUsage)
	childMetrics := fs.String("children-metrics", "", "serve each prefill and decode server's /metrics, without a peer certificate, on a port of its own at this host (e.g. 127.0.0.1); the URLs are printed as the children start")
	nPrefill := fs.Int("prefill", 1, "number of prefill servers")
	nDecode := fs.Int("decode", 1, "number of decode servers")
	faultsPrefill := fs.String("faults-prefill", "", "fault injection on every prefill server's KV connections (transfer.ParseFaults syntax)")
	faultsDecode := fs.String("faults-decode", "", "fault injection on every decode server's KV connections")
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
	// Checked here, not first by each child: a child's refusal would come
	// after the CA and the other children, as "exited before announcing".
	for _, f := range []struct{ name, spec string }{{"--faults-prefill", *faultsPrefill}, {"--faults-decode", *faultsDecode}} {
		if _, err := transfer.ParseFaults(f.spec); err != nil {
			return usagef("%s: %v", f.name, err)
		}
	}
	if _, _, err := net.SplitHostPort(*childMetrics); err == nil || strings.ContainsAny(*childMetrics, "[]") {
		return usagef("--children-metrics %q: give a bare host, like 127.0.0.1; each child picks a port of its own", *childMetrics)
	}
	if err := checkRange("prefill", *nPrefill, 1, 32); err != nil {
		return err
	}
	if err := checkRange("decode", *nDecode, 1, 32); err != nil {
		return err
	}
	cfg, err := loadConfig(*cfgPath, "")
	if err != nil {
		return err
	}
	if *listen != "" {
		cfg.Listen = *listen
	}
	if *metricsListen != "" {
		cfg.MetricsListen = *metricsListen
	}
	// The router's addresses, bound before any child starts: a taken
	// port fails in a moment, not after every child has loaded.
	ln, mln, err := lf.bind(cfg, netListen)
	if err != nil {
		return err
	}
	defer closeListeners(ln, mln)
	log := newLogger(cfg.LogLevel, stderr)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	// Credentials made for the occasion: a private CA that signs one
	// certificate per process (so each process holds only its own key),
	// each naming that process's role (so a prefill's certificate cannot
	// act as the router, nor the router's open KV streams), the CA key
	// deleted as soon as they are issued, everything removed on exit.
	dir, err := os.MkdirTemp("", "bulkhead-cluster-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	caDir := filepath.Join(dir, "ca")
	if err := peerauth.MakeCA(caDir); err != nil {
		return err
	}
	issue := func(name string, role peerauth.Role) (config.Peers, error) {
		p, err := peerauth.IssueNode(caDir, filepath.Join(dir, name), name, role, []string{"127.0.0.1", "localhost"})
		p.FrameBytes, p.Window, p.TransferTimeout = cfg.Peers.FrameBytes, cfg.Peers.Window, cfg.Peers.TransferTimeout
		return p, err
	}
	routerPeers, err := issue("router", peerauth.RoleRouter)
	if err != nil {
		return err
	}
	roleCfgs := make([]string, *nPrefill+*nDecode)
	for i := range roleCfgs {
		name, role := fmt.Sprintf("prefill-%d", i), peerauth.RolePrefill
		if i >= *nPrefill {
			name, role = fmt.Sprintf("decode-%d", i-*nPrefill), peerauth.RoleDecode
		}
		if cfg.Peers, err = issue(name, role); err != nil {
			return err
		}
		roleCfgs[i] = filepath.Join(dir, name, "role.yaml")
		if err := writeRoleConfig(roleCfgs[i], cfg); err != nil {
			return err
		}
	}
	cfg.Peers = routerPeers
	if err := os.Remove(filepath.Join(caDir, peerauth.CAKeyFile)); err != nil {
		return fmt.Errorf("cluster: removing the CA key: %w", err)
	}

	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("cluster: finding my own binary: %w", err)
	}
	var kids []*child
	defer func() {
		// A child that had to be killed, or failed on its way out, may
		// have dropped requests or KV: the operator's scripts must see
		// a failure, not a clean exit.
		if serr := stopChildren(kids, log); err == nil {
			err = serr
		}
	}()
	for i := 0; i < *nPrefill+*nDecode; i++ {
		role, idx, faults := "prefill", i, *faultsPrefill
		if i >= *nPrefill {
			role, idx, faults = "decode", i-*nPrefill, *faultsDecode
		}
		args := []string{role, "--config", roleCfgs[i], "--listen", "127.0.0.1:0"}
		if role == "decode" {
			args = append(args, "--kv-listen", "127.0.0.1:0")
		}
		if faults != "" {
			args = append(args, "--faults", faults)
		}
		if *childMetrics != "" {
			args = append(args, "--metrics-listen", net.JoinHostPort(*childMetrics, "0"))
		}
		c, err := startChild(ctx, fmt.Sprintf("%s[%d]", role, idx), self, args, stderr)
		if err != nil {
			return err
		}
		kids = append(kids, c)
	}
	if ctx.Err() != nil { // a signal that arrived as the last child announced
		return errors.New("cluster: interrupted while starting the children")
	}
	for _, c := range kids {
		line := fmt.Sprintf("bulkhead: cluster %s pid %d control on %s", c.name, c.cmd.Process.Pid, c.control)
		if c.kv != "" {
			cfg.Peers.Decode = append(cfg.Peers.Decode, c.control)
			line += " kv on " + c.kv
		} else {
			cfg.Peers.Prefill = append(cfg.Peers.Prefill, c.control)
		}
		if c.metrics != "" {
			line += " metrics on " + c.metrics
		}
		fmt.Fprintln(stdout, line)
	}

	// The router runs in this process; a child that dies stops everything,
	// loudly, rather than leaving a cluster that silently lost capacity.
	rctx, rstop := context.WithCancel(ctx)
	defer rstop()
	var died error
	var once sync.Once
	for _, c := range kids {
		go func() {
			select {
			case <-c.exited:
				once.Do(func() {
					died = fmt.Errorf("cluster: %s (pid %d) exited unexpectedly (%v); stopping the cluster", c.name, c.cmd.Process.Pid, c.err)
					fmt.Fprintln(stderr, "bulkhead:", died)
					rstop()
				})
			case <-rctx.Done():
			}
		}()
	}
	err = serveRouter(rctx, cfg, *drain, ln, mln, stdout, log)
	rstop()
	once.Do(func() {}) // no death reported after this point
	if died != nil {
		return died
	}
	return err
}

// writeRoleConfig writes cfg as YAML for the prefill and decode children.
// Only the router checks clients' API keys, so the children's copy holds a
// random stand-in per tenant (validation wants one) and the operator's
// keys never reach the disk or another process.
func writeRoleConfig(path string, cfg *config.Config) error {
	rc := *cfg
	// metrics_listen is the router's; the children serve /metrics on their
	// control listeners, to peer certificates only, and on an address of
	// their own with --children-metrics.
	rc.MetricsListen = ""
	rc.Tenants = slices.Clone(cfg.Tenants)
	for i := range rc.Tenants {
		rc.Tenants[i].APIKeys = []string{rand.Text()}
	}
	b, err := yaml.Marshal(&rc)
	if err != nil {
		return fmt.Errorf("cluster: writing the role config: %w", err)
	}
	if _, err := config.Parse(b); err != nil {
		return fmt.Errorf("cluster: the role config does not parse back: %w", err)
	}
	return os.WriteFile(path, b, 0o600)
}

// startChild runs `bulkhead args...` in its own process group (so a
// terminal's Ctrl-C reaches only the cluster, which stops children in
// order), dying with the cluster even if the cluster is killed
// (Pdeathsig), and waits for its announce line. Its stderr is copied to
// ours with its name in front. If ctx ends first (SIGTERM or SIGINT to
// the cluster), it kills the child's group and says so: a child that is
// still loading has nothing to drain, and the cluster's signal handler
// must not hold a Ctrl-C until the announce deadline.
func startChild(ctx context.Context, name, self string, args []string, stderr io.Writer) (*child, error) {
	if ctx.Err() != nil {
		return nil, fmt.Errorf("cluster: interrupted while starting %s", name)
	}
	cmd := exec.Command(self, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	errp, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("cluster: starting %s: %w", name, err)
	}
	c := &child{name: name, cmd: cmd, exited: make(chan struct{})}
	type addrs struct{ control, kv, metrics string }
	found := make(chan addrs, 1)
	var pipes sync.WaitGroup
	pipes.Add(2)
	go func() {
		defer pipes.Done()
		sc := bufio.NewScanner(out)
		metrics := ""
		for sc.Scan() {
			line := sc.Text()
			var a addrs
			if m := metricsAnnounce.FindStringSubmatch(line); m != nil {
				metrics = m[1]
				continue
			} else if m := prefillAnnounce.FindStringSubmatch(line); m != nil {
				a = addrs{control: m[1], metrics: metrics}
			} else if m := decodeAnnounce.FindStringSubmatch(line); m != nil {
				a = addrs{control: m[1], kv: m[2], metrics: metrics}
			} else {
				continue
			}
			select {
			case found <- a:
			default: // only the first announce counts; keep draining stdout
			}
		}
		io.Copy(io.Discard, out)
	}()
	go func() {
		defer pipes.Done()
		sc := bufio.NewScanner(errp)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			fmt.Fprintf(stderr, "%s: %s\n", name, sc.Text())
		}
		io.Copy(io.Discard, errp)
	}()
	go func() {
		pipes.Wait() // Wait must not run before the pipes are drained
		c.err = cmd.Wait()
		close(c.exited)
	}()
	select {
	case a := <-found:
		c.control, c.kv, c.metrics = a.control, a.kv, a.metrics
		return c, nil
	case <-c.exited:
		return nil, fmt.Errorf("cluster: %s exited before announcing its address: %v", name, c.err)
	case <-ctx.Done():
		killGroup(c)
		<-c.exited
		return nil, fmt.Errorf("cluster: interrupted while starting %s", name)
	case <-time.After(clusterStartWait):
		killGroup(c)
		<-c.exited
		return nil, fmt.Errorf("cluster: %s did not announce its address within %s", name, clusterStartWait)
	}
}

// stopChildren sends SIGTERM to every child's process group, waits for
// all of them, and kills the groups of those that do not stop in time.
func stopChildren(kids []*child, log *slog.Logger) error {
	for _, c := range kids {
		_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGTERM)
	}
	var errs []error
	deadline := time.After(clusterStopWait)
	for _, c := range kids {
		select {
		case <-c.exited:
			if c.err != nil {
				errs = append(errs, fmt.Errorf("cluster: %s (pid %d) failed while stopping: %v", c.name, c.cmd.Process.Pid, c.err))
			}
		case <-deadline:
			log.Warn("child did not stop in time; killing it", "child", c.name, "pid", c.cmd.Process.Pid)
			killGroup(c)
			<-c.exited
			errs = append(errs, fmt.Errorf("cluster: %s (pid %d) did not stop within %v and was killed", c.name, c.cmd.Process.Pid, clusterStopWait))
		}
	}
	return errors.Join(errs...)
}

func killGroup(c *child) {
	if err := syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		_ = c.cmd.Process.Kill()
	}
}
