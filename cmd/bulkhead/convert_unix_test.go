//go:build unix

package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// pipeReader makes a named pipe at fifo and reads up to n bytes from it
// in the background, sent on got once read; r, closed when the test ends,
// unblocks that read when closed early. The pipe is opened read-write, so
// neither this open nor the converter's blocks. Both pipe tests start so.
func pipeReader(t *testing.T, fifo string, n int) (r *os.File, got <-chan []byte) {
	t.Helper()
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	r, err := os.OpenFile(fifo, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	c := make(chan []byte, 1)
	go func() {
		b := make([]byte, n)
		n, _ := io.ReadFull(r, b)
		c <- b[:n]
	}()
	return r, c
}

// checkPiped waits for what pipeReader read and says where it is not
// want: the check both pipe tests end with.
func checkPiped(t *testing.T, got <-chan []byte, want []byte) {
	t.Helper()
	select {
	case b := <-got:
		if !bytes.Equal(b, want) {
			t.Errorf("read %d bytes from the pipe that differ from the file's %d", len(b), len(want))
		}
	case <-time.After(30 * time.Second):
		t.Fatal("nothing came through the pipe")
	}
}

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
	r, got := pipeReader(t, fifo, len(want))
	if _, errOut, code := runCLI(t, "convert", "--type", "q8_0", "--out", fifo); code != 0 {
		t.Fatalf("convert to a pipe: exit %d: %s", code, errOut)
	}
	if fi, err := os.Lstat(fifo); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		r.Close() // unblocks the reader
		t.Fatalf("the pipe was replaced: %v %v", fi.Mode(), err)
	}
	checkPiped(t, got, want)
}

// An --out that is a symbolic link is written through, as cp and a
// shell's > write: the target gets the GGUF and the link stays a link.
// Renaming the temporary file over the link replaced it with a regular
// file and left its target stale. A dangling link names the file to
// create, a relative link is resolved from the directory holding it (here
// reached through a linked directory, where resolving "../" lexically
// names another file), and a link to a pipe writes the pipe in place.
func TestConvertThroughSymlink(t *testing.T) {
	want, err := os.ReadFile(convertEmbedded(t, "q8_0"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	real := filepath.Join(dir, "real")
	if err := os.MkdirAll(filepath.Join(real, "models"), 0o755); err != nil {
		t.Fatal(err)
	}
	// dir/models -> real/models, so dir/models/../x is real/x, not dir/x.
	if err := os.Symlink(filepath.Join(real, "models"), filepath.Join(dir, "models")); err != nil {
		t.Fatal(err)
	}
	existing := filepath.Join(real, "existing.gguf")
	if err := os.WriteFile(existing, []byte("previous"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, link, target, points string // points: what the link holds
	}{
		{"to an existing file", filepath.Join(dir, "a.gguf"), existing, existing},
		{"dangling", filepath.Join(dir, "b.gguf"), filepath.Join(real, "new.gguf"), filepath.Join(real, "new.gguf")},
		{"relative, in a linked directory", filepath.Join(dir, "models", "c.gguf"), filepath.Join(real, "rel.gguf"), "../rel.gguf"},
		{"to a link", filepath.Join(dir, "d.gguf"), existing, filepath.Join(dir, "a.gguf")},
	} {
		if err := os.Symlink(tc.points, tc.link); err != nil {
			t.Fatal(err)
		}
		if _, errOut, code := runCLI(t, "convert", "--type", "q8_0", "--out", tc.link); code != 0 {
			t.Errorf("%s: exit %d: %s", tc.name, code, errOut)
			continue
		}
		if fi, err := os.Lstat(tc.link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Errorf("%s: %s is no longer a symbolic link (%v, %v)", tc.name, tc.link, fi.Mode(), err)
		}
		if got, err := os.ReadFile(tc.target); err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: the target %s does not hold the GGUF (%d bytes, %v)", tc.name, tc.target, len(got), err)
		}
		os.Remove(tc.target)
	}
	if names := entries(t, real); len(names) != 1 || names[0] != "models" {
		t.Errorf("%s holds %v after the conversions; want only models (no temporary files)", real, names)
	}

	fifo := filepath.Join(dir, "pipe")
	r, got := pipeReader(t, fifo, len(want))
	link := filepath.Join(dir, "to-pipe.gguf")
	if err := os.Symlink(fifo, link); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := runCLI(t, "convert", "--type", "q8_0", "--out", link); code != 0 {
		r.Close()
		t.Fatalf("convert through a link to a pipe: exit %d: %s", code, errOut)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the link to the pipe was replaced: %v %v", fi.Mode(), err)
	}
	checkPiped(t, got, want)
}

// A loop of links is refused with an error naming the --out given, and
// writes nothing.
func TestConvertSymlinkLoop(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.gguf"), filepath.Join(dir, "b.gguf")
	if err := os.Symlink(b, a); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(a, b); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := runCLI(t, "convert", "--out", a)
	if code != 1 || !strings.Contains(errOut, "writing "+a+": ") || !strings.Contains(errOut, "symbolic links") {
		t.Errorf("a loop of links: exit %d, stderr %q; want an error naming %s and the links", code, errOut, a)
	}
	if names := entries(t, dir); len(names) != 2 {
		t.Errorf("%s holds %v; want only the two links", dir, names)
	}
}
