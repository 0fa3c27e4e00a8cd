//go:build unix

package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// An --out that is not a regular file (here a named pipe; /dev/null and
// /dev/stdout alike) is written to, not replaced: renaming the temporary
// file over it replaced the pipe with a regular file, and run as root
// replaced /dev/null itself.
func TestConvertToPipe(t *testing.T) {
	dir := t.TempDir()
	want, err := os.ReadFile(convertEmbedded(t, "q8_0"))
	if err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "pipe")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	// Opened read-write, so neither this open nor the converter's blocks.
	r, err := os.OpenFile(fifo, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got := make(chan []byte, 1)
	go func() {
		b := make([]byte, len(want))
		n, _ := io.ReadFull(r, b)
		got <- b[:n]
	}()
	if _, errOut, code := runCLI(t, "convert", "--type", "q8_0", "--out", fifo); code != 0 {
		t.Fatalf("convert to a pipe: exit %d: %s", code, errOut)
	}
	if fi, err := os.Lstat(fifo); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		r.Close() // unblocks the reader
		t.Fatalf("the pipe was replaced: %v %v", fi.Mode(), err)
	}
	select {
	case b := <-got:
		if !bytes.Equal(b, want) {
			t.Errorf("read %d bytes from the pipe that differ from the file's %d", len(b), len(want))
		}
	case <-time.After(30 * time.Second):
		t.Fatal("nothing came through the pipe")
	}
}
