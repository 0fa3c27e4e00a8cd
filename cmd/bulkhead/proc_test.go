package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// bulkheadBinary builds the real binary once per test run: end-to-end tests
// start it as separate processes, exactly as a user would.
func bulkheadBinary(t testing.TB) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "bulkhead-e2e")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "bulkhead")
		out, err := exec.Command("go", "build", "-tags", buildTags, "-o", binPath, ".").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// process is a bulkhead process started by a test.
type process struct {
	cmd     *exec.Cmd
	base    string       // scheme://host:port of its HTTP listener
	metrics string       // scheme://host:port serving /metrics; "": base
	scrape  *http.Client // for /metrics; nil: http.DefaultClient
	stderr  *syncBuffer
	exited  chan error
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

var (
	servingLine = regexp.MustCompile(`on http://([^/\s]+)/v1`)
	metricsLine = regexp.MustCompile(`^bulkhead: metrics on (http://[^/\s]+)/metrics`)
)

// startBulkhead runs `bulkhead args...` (serve, router or cluster) with
// --listen and --metrics-listen on 127.0.0.1:0 (the kernel picks the
// ports) and waits for the line announcing the API's address.
func startBulkhead(t testing.TB, args ...string) *process {
	t.Helper()
	p, m := launch(t, servingLine, append(args, "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0")...)
	p.base = "http://" + m[1]
	if p.metrics == "" {
		t.Fatalf("bulkhead %v did not announce its metrics listener before its API", args)
	}
	return p
}

// launch runs `bulkhead args...`, waits for the first stdout line matching
// announce and returns its submatches. The process is stopped with SIGTERM
// when the test ends (killed if it does not stop within 20s).
func launch(t testing.TB, announce *regexp.Regexp, args ...string) (*process, []string) {
	t.Helper()
	cmd := exec.Command(bulkheadBinary(t), args...)
	p := &process{cmd: cmd, stderr: &syncBuffer{}, exited: make(chan error, 1)}
	cmd.Stderr = p.stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	found := make(chan []string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			// Announced before the API, so set before found is sent.
			if m := metricsLine.FindStringSubmatch(sc.Text()); m != nil && p.metrics == "" {
				p.metrics = m[1]
			}
			if m := announce.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case found <- m:
				default:
				}
			}
		}
		io.Copy(io.Discard, stdout)
	}()
	go func() { p.exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-p.exited
			t.Errorf("bulkhead %v did not stop within 20s of SIGTERM", args)
		}
		if t.Failed() {
			t.Logf("bulkhead %v stderr:\n%s", args, p.stderr.String())
		}
	})
	select {
	case m := <-found:
		return p, m
	case err := <-p.exited:
		t.Fatalf("bulkhead %v exited before announcing itself: %v\n%s", args, err, p.stderr.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("bulkhead %v did not announce itself within 60s\n%s", args, p.stderr.String())
	}
	return nil, nil
}

// client returns an official OpenAI client for the process, with key.
func (p *process) client(key string) openai.Client {
	opts := []option.RequestOption{option.WithBaseURL(p.base + "/v1/"), option.WithMaxRetries(0), option.WithRequestTimeout(2 * time.Minute)}
	if key != "" {
		opts = append(opts, option.WithAPIKey(key))
	}
	return openai.NewClient(opts...)
}

// metric returns the sum of the samples of name whose labels contain every
// one of labels (e.g. `state="free"`), read from /metrics.
func (p *process) metric(t testing.TB, name string, labels ...string) float64 {
	t.Helper()
	c := p.scrape
	if c == nil {
		c = http.DefaultClient
	}
	base := p.metrics
	if base == "" {
		base = p.base
	}
	resp, err := c.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var sum float64
	found := false
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+" ") && !strings.HasPrefix(line, name+"{") {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(line, l)
		}
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		sum += v
		found = true
	}
	if !found {
		return 0
	}
	return sum
}

// waitMetric polls until metric equals want or the deadline passes.
func (p *process) waitMetric(t testing.TB, want float64, name string, labels ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		got := p.metric(t, name, labels...)
		if got == want {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("metric %s%v = %v, want %v", name, labels, got, want)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// waitLog waits until the process's stderr holds every one of parts, up
// to 10 s, and fails the test with the log if it does not: a line is
// written after the event a test can observe (a metric, a refused
// connection), not before.
func (p *process) waitLog(t testing.TB, why string, parts ...string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		l := p.stderr.String()
		missing := false
		for _, part := range parts {
			missing = missing || !strings.Contains(l, part)
		}
		if !missing {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s:\n%s", why, l)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func writeConfig(t testing.TB, yaml string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "bulkhead.yaml")
	if err := os.WriteFile(p, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
