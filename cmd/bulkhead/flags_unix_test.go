//go:build unix

package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/embedded"
)

// TestFlagValuesRefused: flag values that used to hang startup (a named
// pipe as a model file), fill memory (/dev/zero as a tokenizer, read
// whole), or be taken silently (a negative --drain or --threads, a
// certificate for a host no one can dial, an API key no HTTP header can
// carry) are refused at once, with an error naming the flag, before
// anything is loaded, written or sent.
func TestFlagValuesRefused(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	tok := filepath.Join(dir, "tok.bin")
	ckpt := filepath.Join(dir, "ckpt.bin")
	if err := os.WriteFile(tok, embedded.Tokenizer, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ckpt, embedded.Checkpoint, 0o644); err != nil {
		t.Fatal(err)
	}
	// A tokenizer file far larger than any real one, sparse on disk.
	huge := filepath.Join(dir, "huge-tok.bin")
	if f, err := os.Create(huge); err != nil {
		t.Fatal(err)
	} else if err := f.Truncate(maxTokenizerBytes + 1); err != nil {
		t.Fatal(err)
	} else {
		f.Close()
	}
	fifoCfg := writeConfig(t, "model: "+fifo+"\n")
	out := filepath.Join(dir, "out.gguf")
	pki := filepath.Join(dir, "pki")
	target := "http://127.0.0.1:1" // never reached: each is refused first

	cases := []struct {
		args []string
		code int
		want string // in stderr
	}{
		{[]string{"generate", "--prompt", "x", "--model", fifo}, 2, "--model"},
		{[]string{"generate", "--prompt", "x", "--model", dir}, 2, "is a directory"},
		{[]string{"generate", "--prompt", "x", "--model", ckpt, "--tokenizer", "/dev/zero"}, 2, "--tokenizer /dev/zero is not a regular file"},
		{[]string{"generate", "--prompt", "x", "--model", ckpt, "--tokenizer", fifo}, 2, "--tokenizer"},
		{[]string{"generate", "--prompt", "x", "--threads", "-1"}, 2, "--threads -1"},
		{[]string{"bench", "model", "--threads", "-4"}, 2, "--threads -4"},
		{[]string{"bench", "model", "--model", fifo}, 2, "--model"},
		{[]string{"convert", "--checkpoint", fifo, "--tokenizer", tok, "--out", out}, 2, "--checkpoint"},
		{[]string{"convert", "--checkpoint", ckpt, "--tokenizer", "/dev/zero", "--out", out}, 2, "--tokenizer"},
		{[]string{"convert", "--checkpoint", ckpt, "--tokenizer", huge, "--out", out}, 2, "MiB"},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--model", fifo}, 2, "--model"},
		{[]string{"preflight", "--model", fifo}, 2, "--model"},
		{[]string{"preflight", "--config", fifoCfg}, 1, "model (in " + fifoCfg + ")"},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--drain", "-1s"}, 2, "--drain -1s"},
		{[]string{"router", "--drain", "-1s"}, 2, "--drain -1s"},
		{[]string{"prefill", "--drain", "-1s"}, 2, "--drain -1s"},
		{[]string{"decode", "--drain", "-1s"}, 2, "--drain -1s"},
		{[]string{"cluster", "--drain", "-1s"}, 2, "--drain -1s"},
		{[]string{"cluster", "--children-metrics", "127.0.0.1:9090"}, 2, "--children-metrics"},
		{[]string{"cluster", "--faults-prefill", "drop=2"}, 2, "--faults-prefill"},
		{[]string{"certs", "--out", pki, "--role", "router", "--hosts", "999.1.1.1"}, 2, "--hosts"},
		{[]string{"certs", "--out", pki, "--role", "router", "--hosts", "not a host"}, 2, "--hosts"},
		{[]string{"certs", "--out", pki, "--role", "router", "--hosts", "localhost,http://10.0.0.5:8080"}, 2, "--hosts"},
		{[]string{"bench", "load", "--target", target, "--model", "m", "--concurrency", "1", "--requests", "1", "--api-key", "sk-123\n"}, 2, "--api-key"},
		{[]string{"audit", "--target", target, "--key", "a=aaaaaaaaaa\r", "--key", "b=bbbbbbbbbb"}, 2, "control character"},
	}
	for _, c := range cases {
		type res struct {
			errOut string
			code   int
		}
		done := make(chan res, 1)
		go func() {
			_, errOut, code := runCLI(t, c.args...)
			done <- res{errOut, code}
		}()
		select {
		case r := <-done:
			if r.code != c.code || !strings.Contains(r.errOut, c.want) {
				t.Errorf("%q: exit %d, stderr %q; want exit %d naming %q", c.args, r.code, r.errOut, c.code, c.want)
			}
		case <-time.After(20 * time.Second):
			// The goroutine stays blocked; the test binary ends anyway.
			t.Fatalf("%q: still running after 20s (blocked opening a named pipe?)", c.args)
		}
	}
	if _, err := os.Stat(pki); !os.IsNotExist(err) {
		t.Errorf("a refused certs run left %s behind (%v)", pki, err)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("a refused convert left %s behind (%v)", out, err)
	}
}
