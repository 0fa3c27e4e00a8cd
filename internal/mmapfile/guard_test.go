package mmapfile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

// mapTruncated maps a file of four pages, then cuts it to one, as another
// process rewriting a model in place would: pages 1 to 3 of the mapping
// are no longer backed.
func mapTruncated(t *testing.T, name string) (path string, m *Map, data []byte) {
	t.Helper()
	page := os.Getpagesize()
	path = filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, make([]byte, 4*page), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	if err := os.Truncate(path, int64(page)); err != nil {
		t.Fatal(err)
	}
	return path, m, m.Bytes()
}

// A read past a truncated file's new end is an error that says the file
// changed, not a SIGBUS that kills the process; reads of what is left,
// and f's own errors, are untouched.
func TestGuardTurnsAFaultIntoAnError(t *testing.T) {
	if !Mapped {
		t.Skip("files are read, not mapped, on this platform")
	}
	_, m, data := mapTruncated(t, "m.bin")
	page := os.Getpagesize()
	var sink byte
	err := m.Guard(func() error {
		sink += data[0]
		sink += data[3*page+5] // faults
		return nil
	})
	if !errors.Is(err, ErrChanged) || !strings.Contains(err.Error(), fmt.Sprintf("byte %d ", 3*page+5)) {
		t.Fatalf("Guard: %v; want ErrChanged at byte %d", err, 3*page+5)
	}
	// The goroutine is back to crashing on faults: Guard restored the
	// setting it found.
	if debug.SetPanicOnFault(false) {
		t.Fatal("SetPanicOnFault was left on after a guarded fault")
	}
	if err := m.Guard(func() error { sink += data[page-1]; return nil }); err != nil {
		t.Fatalf("a read inside the file: %v", err)
	}
	own := errors.New("the converter's own")
	if err := m.Guard(func() error { return own }); err != own {
		t.Fatalf("f's error came back as %v", err)
	}
	// A write straight from the lost pages fails in the kernel (EFAULT)
	// instead of faulting; the file being shorter, it is ErrChanged too.
	out, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	err = m.Guard(func() error { _, err := out.Write(data[2*page:]); return err })
	if !errors.Is(err, ErrChanged) {
		t.Fatalf("a write from the lost pages: %v; want ErrChanged", err)
	}
}

// A fault in another mapping, or any other panic, is not the guarded
// file's doing: it passes through as a panic.
func TestGuardPassesOtherPanicsThrough(t *testing.T) {
	if !Mapped {
		t.Skip("files are read, not mapped, on this platform")
	}
	_, guarded, _ := mapTruncated(t, "a.bin")
	_, _, other := mapTruncated(t, "b.bin")
	page := os.Getpagesize()
	var sink byte
	for name, f := range map[string]func() error{
		"a fault elsewhere": func() error { sink += other[3*page]; return nil },
		"a plain panic":     func() error { panic("boom") },
	} {
		r := func() (r any) {
			defer func() { r = recover() }()
			guarded.Guard(f)
			return nil
		}()
		if r == nil {
			t.Errorf("%s: Guard returned instead of panicking", name)
		}
	}
}

// The EFAULT check asks the file that is mapped, not whatever file now
// has its name: a full-size file renamed over the cut-short input (as a
// download or a build step replacing the model would) must not hide the
// cut and leave the write error plain.
func TestGuardSeesTheMappedFileNotThePath(t *testing.T) {
	if !Mapped {
		t.Skip("files are read, not mapped, on this platform")
	}
	path, m, data := mapTruncated(t, "m.bin")
	page := os.Getpagesize()
	fresh := filepath.Join(filepath.Dir(path), "fresh.bin")
	if err := os.WriteFile(fresh, make([]byte, 4*page), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(fresh, path); err != nil {
		t.Fatal(err)
	}
	out, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	err = m.Guard(func() error { _, err := out.Write(data[2*page:]); return err })
	if !errors.Is(err, ErrChanged) || !strings.Contains(err.Error(), "shrank") {
		t.Fatalf("a write from the lost pages, with a full-size file renamed over the input: %v; want ErrChanged", err)
	}
	// The same file, intact: an EFAULT that is not the file's doing (a
	// buffer that was never mapped) stays a plain error.
	path2 := filepath.Join(t.TempDir(), "ok.bin")
	if err := os.WriteFile(path2, make([]byte, 4*page), 0o644); err != nil {
		t.Fatal(err)
	}
	intact, err := Open(path2)
	if err != nil {
		t.Fatal(err)
	}
	defer intact.Close()
	efault := &os.PathError{Op: "write", Path: "out", Err: efaultErr()}
	if err := intact.Guard(func() error { return efault }); errors.Is(err, ErrChanged) || err != efault {
		t.Fatalf("an EFAULT with the mapped file intact: %v; want it as it was", err)
	}
}
