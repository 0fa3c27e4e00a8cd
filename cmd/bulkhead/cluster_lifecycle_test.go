package main

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/config"
)

var (
	childLine        = regexp.MustCompile(`^bulkhead: cluster (\S+) pid (\d+) control on`)
	childMetricsLine = regexp.MustCompile(`^bulkhead: cluster (\S+) pid .* metrics on (\S+)$`)
)

// startClusterProc runs `bulkhead cluster` with extra flags and returns it
// with its children's pids, and their metrics URLs if it printed any, once
// the router serves.
func startClusterProc(t *testing.T, extra ...string) (*exec.Cmd, map[string]int, chan error, *syncBuffer, map[string]string) {
	t.Helper()
	cmd := exec.Command(bulkheadBinary(t), append([]string{"cluster", "--prefill", "1", "--decode", "2", "--listen", "127.0.0.1:0"}, extra...)...)
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	pids, metrics := map[string]int{}, map[string]string{}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if m := childLine.FindStringSubmatch(sc.Text()); m != nil {
				pids[m[1]], _ = strconv.Atoi(m[2])
			}
			if m := childMetricsLine.FindStringSubmatch(sc.Text()); m != nil {
				metrics[m[1]] = m[2]
			}
			if servingLine.MatchString(sc.Text()) {
				close(ready)
			}
		}
		io.Copy(io.Discard, out)
	}()
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { cmd.Process.Kill() })
	select {
	case <-ready:
	case err := <-exited:
		t.Fatalf("cluster exited before serving: %v\n%s", err, stderr.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("cluster did not serve within 60s\n%s", stderr.String())
	}
	if len(pids) != 3 {
		t.Fatalf("cluster announced children %v, want 3", pids)
	}
	return cmd, pids, exited, stderr, metrics
}

// gone waits until no process has pid (children are reaped by the
// cluster, or by init once orphaned).
func gone(t *testing.T, name string, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := syscall.Kill(pid, 0)
		if errors.Is(err, syscall.ESRCH) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s (pid %d) is still running: an orphan", name, pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestClusterStopsEveryChild: SIGTERM stops the router and every child
// (exit 0); SIGKILL of the cluster still takes the children down; a child
// that dies makes the cluster say so and stop. With --children-metrics,
// each child's /metrics is reachable without a peer certificate at the
// URL the cluster printed for it, and holds that child's own metrics.
func TestClusterStopsEveryChild(t *testing.T) {
	t.Run("sigterm", func(t *testing.T) {
		cmd, pids, exited, stderr, metrics := startClusterProc(t, "--children-metrics", "127.0.0.1")
		if len(metrics) != len(pids) {
			t.Errorf("metrics URLs %v for children %v; want one each", metrics, pids)
		}
		for name, url := range metrics {
			resp, err := http.Get(url)
			if err != nil {
				t.Fatalf("%s's metrics at %s: %v", name, url, err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			want := "bulkhead_kv_transfers_started_total"
			if resp.StatusCode != 200 || !strings.Contains(string(body), want) {
				t.Errorf("%s's metrics at %s: %s, %d bytes; want 200 with %s", name, url, resp.Status, len(body), want)
			}
		}
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Fatalf("cluster exited with %v after SIGTERM\n%s", err, stderr.String())
			}
		case <-time.After(30 * time.Second):
			t.Fatal("cluster did not stop within 30s of SIGTERM")
		}
		for name, pid := range pids {
			gone(t, name, pid)
		}
	})
	t.Run("sigkill", func(t *testing.T) {
		cmd, pids, exited, _, _ := startClusterProc(t)
		cmd.Process.Kill()
		<-exited
		for name, pid := range pids {
			gone(t, name, pid)
		}
	})
	t.Run("child-dies", func(t *testing.T) {
		_, pids, exited, stderr, _ := startClusterProc(t)
		syscall.Kill(pids["decode[1]"], syscall.SIGKILL)
		select {
		case err := <-exited:
			if err == nil || !strings.Contains(stderr.String(), "decode[1]") || !strings.Contains(stderr.String(), "exited unexpectedly") {
				t.Fatalf("cluster exit %v; stderr does not name the dead child:\n%s", err, stderr.String())
			}
		case <-time.After(30 * time.Second):
			t.Fatal("cluster kept running after a child died")
		}
		for name, pid := range pids {
			gone(t, name, pid)
		}
	})
}

// TestClusterStopsWhileStarting: SIGTERM while a child is still starting
// stops the cluster at once, with an error that says so, instead of being
// held until the child's announce deadline; the child's whole process
// group goes with it. The child here is a shell that never announces (a
// model file that blocks its opening, a named pipe, is now refused before
// any child starts), with a grandchild holding its output pipes open, so
// a group left running would keep startChild waiting.
func TestClusterStopsWhileStarting(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skipf("no shell: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	time.AfterFunc(500*time.Millisecond, cancel)
	type res struct {
		c   *child
		err error
	}
	done := make(chan res, 1)
	go func() {
		c, err := startChild(ctx, "prefill[0]", sh, []string{"-c", "sleep 60 & wait"}, io.Discard)
		done <- res{c, err}
	}()
	select {
	case r := <-done:
		if r.c != nil || r.err == nil || !strings.Contains(r.err.Error(), "interrupted") {
			t.Fatalf("startChild interrupted while starting: child %v, error %v; want no child and an error that says it was interrupted", r.c, r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("startChild still waiting 10s after its context ended")
	}
}

// TestRoleConfigHoldsNoAPIKeys: the children's config file carries none of
// the operator's API keys, parses back, and leaves the router's config
// (which checks the keys) as it was.
func TestRoleConfigHoldsNoAPIKeys(t *testing.T) {
	keys := []string{"alpha-key-0123456789abcdef", "alpha-key-second-0123456789", "beta-key-0123456789abcdef"}
	cfg, err := config.Parse([]byte(`
tenants:
  - name: alpha
    api_keys: ["` + keys[0] + `", "` + keys[1] + `"]
  - name: beta
    api_keys: ["` + keys[2] + `"]
`))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "role.yaml")
	if err := writeRoleConfig(path, cfg); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if strings.Contains(string(b), k) {
			t.Errorf("role config holds API key %q", k)
		}
	}
	back, err := config.Parse(b)
	if err != nil {
		t.Fatalf("role config does not parse: %v", err)
	}
	if len(back.Tenants) != 2 || back.Tenants[0].Name != "alpha" || back.Tenants[1].Name != "beta" {
		t.Fatalf("role config tenants: %+v", back.Tenants)
	}
	if got := cfg.Tenants[0].APIKeys; len(got) != 2 || got[0] != keys[0] || got[1] != keys[1] {
		t.Fatalf("the router's own config lost its keys: %v", got)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("role config mode %v (%v), want 0600", fi.Mode().Perm(), err)
	}
}

// TestStopChildrenReportsAMessyStop: a child that ignores SIGTERM is
// killed at the stop wait's end and one that exits non-zero is reported;
// either way the stop is an error (so `cluster` does not exit 0), naming
// the child. Children that exit cleanly are not mentioned.
func TestStopChildrenReportsAMessyStop(t *testing.T) {
	old := clusterStopWait
	clusterStopWait = 300 * time.Millisecond
	defer func() { clusterStopWait = old }()
	start := func(name, script string) *child {
		cmd := exec.Command("sh", "-c", script)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		c := &child{name: name, cmd: cmd, exited: make(chan struct{})}
		go func() { c.err = cmd.Wait(); close(c.exited) }()
		return c
	}
	clean := start("clean[0]", `trap 'exit 0' TERM; while :; do sleep 0.05; done`)
	stubborn := start("stubborn[0]", `trap '' TERM; while :; do sleep 0.05; done`)
	failing := start("failing[0]", `trap 'exit 3' TERM; while :; do sleep 0.05; done`)
	time.Sleep(100 * time.Millisecond) // let the shells install their traps
	err := stopChildren([]*child{clean, stubborn, failing}, slog.New(slog.DiscardHandler))
	if err == nil {
		t.Fatal("a killed child and a failing one, and stopChildren reported nothing")
	}
	msg := err.Error()
	for _, want := range []string{"stubborn[0]", "was killed", "failing[0]", "exit status 3"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not mention %q", msg, want)
		}
	}
	if strings.Contains(msg, "clean[0]") {
		t.Errorf("error %q mentions the child that stopped cleanly", msg)
	}
}
