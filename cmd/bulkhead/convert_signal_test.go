//go:build unix

package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// SIGINT or SIGTERM while convert writes stops it: the temporary file is
// removed, the existing output is kept, and the command exits 1 saying it
// was interrupted. Both used to kill the process outright and leave the
// temporary file, up to the size of the model, beside the output. The
// 1.1B shape takes a minute or more to write here, so the signal lands in
// the middle; the conversion is stopped within a tensor of it.
func TestConvertInterrupted(t *testing.T) {
	bin := bulkheadBinary(t)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		dir := t.TempDir()
		out := filepath.Join(dir, "out.gguf")
		if err := os.WriteFile(out, []byte("previous"), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "convert", "--random", "1.1B", "--type", "q4_0", "--out", out)
		var stderr syncBuffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() { cmd.Wait(); close(exited) }()
		stop := func() {
			cmd.Process.Kill()
			<-exited
		}

		// Signalled once tensor data reaches the temporary file (the
		// header is flushed with the first tensor), so the conversion is
		// under way, not starting.
		partial := ""
		for deadline := time.Now().Add(2 * time.Minute); partial == ""; {
			for _, name := range entries(t, dir) {
				if fi, err := os.Stat(filepath.Join(dir, name)); name != "out.gguf" && err == nil && fi.Size() > 0 {
					partial = name
				}
			}
			select {
			case <-exited:
				t.Fatalf("%v: convert ended before it was signalled: %v\n%s", sig, cmd.ProcessState, stderr.String())
			case <-time.After(20 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				stop()
				t.Fatalf("%v: no temporary file with data appeared in %s within 2 minutes", sig, dir)
			}
		}
		if !strings.HasPrefix(partial, "out.gguf.tmp-") {
			t.Errorf("the temporary file is %q; want out.gguf.tmp-*, which an operator can recognise", partial)
		}
		if err := cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		select {
		case <-exited:
		case <-time.After(time.Minute):
			stop()
			t.Fatalf("%v: convert still running a minute after the signal", sig)
		}
		errOut := stderr.String()
		if code, want := cmd.ProcessState.ExitCode(), 128+int(sig); code != want {
			t.Errorf("%v: %v, stderr %q; want exit status %d, as a shell reports a command the signal ended", sig, cmd.ProcessState, errOut, want)
		}
		name := map[syscall.Signal]string{syscall.SIGINT: "SIGINT", syscall.SIGTERM: "SIGTERM"}[sig]
		if want := "writing " + out + ": interrupted by " + name; !strings.Contains(errOut, want) {
			t.Errorf("%v: stderr %q; want %q", sig, errOut, want)
		}
		if names := entries(t, dir); len(names) != 1 || names[0] != "out.gguf" {
			t.Errorf("%v: %s holds %v after the interruption; want only out.gguf", sig, dir, names)
		}
		if b, err := os.ReadFile(out); err != nil || !bytes.Equal(b, []byte("previous")) {
			t.Errorf("%v: the existing output was replaced (%q, %v)", sig, b, err)
		}
	}
}
