package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/llama2c"
)

// The most memory a real convert process holds while converting a
// checkpoint stays well under the checkpoint's size: it is mapped, not
// read (TestConvertCheckpointStreams checks the heap), and each tensor's
// pages are handed back once it is written. Without that a mapped
// checkpoint ends up wholly resident, counted against the process by
// monitors and by the out-of-memory killer, though the kernel could
// reclaim it.
//
// The peak is the kernel's (VmHWM), so no sampling can miss it. It is read
// while the process is alive: ru_maxrss after exit would also count the
// test process, whose memory a child started with vfork inherits as its
// high-water mark. The output is a pipe, and the test stops reading 4 MB
// before the end, which keeps the process blocked on its last writes with
// all but the last few tensors converted.
func TestConvertCheckpointPeakRSS(t *testing.T) {
	bin := bulkheadBinary(t)
	dir := t.TempDir()
	shape := streamShape
	shape.Layers = 8 // 110 MB: far above a Go process's own 10-20 MB
	ckpt, tok, size := writeCheckpoint(t, dir, shape)
	fifo := filepath.Join(dir, "pipe")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	const held = 4 << 20
	for _, typ := range []string{"f32", "q8_0"} {
		ref := filepath.Join(dir, "ref.gguf")
		if _, errOut, code := runCLI(t, "convert", "--checkpoint", ckpt, "--tokenizer", tok, "--type", typ, "--out", ref); code != 0 {
			t.Fatalf("convert --type %s: exit %d: %s", typ, code, errOut)
		}
		fi, err := os.Stat(ref)
		if err != nil {
			t.Fatal(err)
		}
		os.Remove(ref)

		hwm, err := peakWhileWriting(bin, fifo, fi.Size()-held, "convert", "--checkpoint", ckpt, "--tokenizer", tok, "--type", typ, "--out", fifo)
		if err != nil {
			t.Fatalf("--type %s: %v", typ, err)
		}
		t.Logf("--type %s: peak RSS %d bytes converting a %d-byte checkpoint", typ, hwm, size)
		if hwm > size/2 {
			t.Errorf("--type %s: converting a %d-byte checkpoint peaked at %d bytes resident; want under %d", typ, size, hwm, size/2)
		}
	}
}

// peakWhileWriting runs bin with args, which write to the named pipe fifo,
// reads first bytes from the pipe, and returns the process's VmHWM then;
// it then reads the pipe until the process exits, which must succeed.
func peakWhileWriting(bin, fifo string, first int64, args ...string) (int64, error) {
	var hwm int64
	var hwmErr error
	exit, stderr, err := whileWriting(bin, fifo, first, func(pid int) { hwm, hwmErr = vmHWM(pid) }, args...)
	switch {
	case err != nil:
		return 0, err
	case exit != nil:
		return 0, fmt.Errorf("%v\n%s", exit, stderr)
	}
	return hwm, hwmErr
}

// whileWriting runs bin with args, which write to the named pipe fifo,
// reads first bytes from the pipe, calls at with the process's id while
// it is blocked on its next writes, then reads the pipe until the process
// exits. It returns how the process exited and what it wrote to stderr;
// err is the harness's own failure (the process ended early or hung).
func whileWriting(bin, fifo string, first int64, at func(pid int), args ...string) (exit error, stderr string, err error) {
	// Opened read-write, so neither this open nor the writer's blocks.
	r, err := os.OpenFile(fifo, os.O_RDWR, 0)
	if err != nil {
		return nil, "", err
	}
	defer r.Close()
	cmd := exec.Command(bin, args...)
	var errOut syncBuffer
	cmd.Stderr = &errOut
	if err := cmd.Start(); err != nil {
		return nil, "", err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	done := make(chan error, 1)
	go func() {
		_, err := io.CopyN(io.Discard, r, first)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			return nil, "", err
		}
	case err := <-exited:
		r.Close() // unblocks the reader
		return nil, "", fmt.Errorf("exited before writing %d bytes: %v\n%s", first, err, errOut.String())
	case <-time.After(time.Minute):
		cmd.Process.Kill()
		r.Close()
		return nil, "", fmt.Errorf("did not write %d bytes within a minute", first)
	}
	at(cmd.Process.Pid)
	// The rest of the file, to EOF: the test holds a write end too, so
	// the drain ends when the process does, not at end of file.
	go io.Copy(io.Discard, r)
	select {
	case exit = <-exited:
		return exit, errOut.String(), nil
	case <-time.After(time.Minute):
		cmd.Process.Kill()
		return nil, "", fmt.Errorf("still running a minute after its output was drained")
	}
}

// A checkpoint truncated while convert reads it (another process rewriting
// it in place) ends the conversion with an error that names the file and
// says what happened, and exit status 1. It used to end the process with
// SIGBUS and a runtime stack dump: the checkpoint is mapped, and a mapping
// faults where the file no longer reaches.
func TestConvertCheckpointTruncatedMidway(t *testing.T) {
	bin := bulkheadBinary(t)
	dir := t.TempDir()
	fifo := filepath.Join(dir, "pipe")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	// Cut once past the first flush of convert's 1 MB buffer, and once
	// some tensors later: the next read of the mapping faults. (A write
	// straight from the mapping fails with EFAULT instead; mmapfile's
	// TestGuardTurnsAFaultIntoAnError covers that path.)
	for _, at := range []int64{2 << 20, 11 << 19} {
		ckpt, tok, _ := writeCheckpoint(t, t.TempDir(), streamShape)
		cut := func(int) {
			if err := os.Truncate(ckpt, llama2c.HeaderBytes); err != nil {
				t.Error(err)
			}
		}
		exit, stderr, err := whileWriting(bin, fifo, at, cut, "convert", "--checkpoint", ckpt, "--tokenizer", tok, "--out", fifo)
		if err != nil {
			t.Fatal(err)
		}
		var ee *exec.ExitError
		if !errors.As(exit, &ee) || ee.ExitCode() != 1 {
			t.Fatalf("cut at %d: convert ended with %v; want exit status 1\n%s", at, exit, stderr)
		}
		if want := "llama2c " + ckpt + ": the file shrank, was rewritten, or could not be read while it was mapped"; !strings.Contains(stderr, want) {
			t.Errorf("cut at %d: stderr %q; want it to contain %q", at, stderr, want)
		}
		if strings.Contains(stderr, "goroutine ") {
			t.Errorf("cut at %d: stderr holds a stack dump:\n%s", at, stderr)
		}
	}
}

// vmHWM reads a process's peak resident set size from /proc.
func vmHWM(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range bytes.Lines(b) {
		if rest, ok := bytes.CutPrefix(line, []byte("VmHWM:")); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(string(rest)), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("/proc/%d/status has no VmHWM line", pid)
}
