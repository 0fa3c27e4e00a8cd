package mmapfile

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Open returns the file's bytes, maps (or reads) an empty file as empty,
// and refuses what is not a regular file; its errors leave the path to
// the caller.
func TestOpen(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "m.bin")
	want := bytes.Repeat([]byte("bulkhead"), 1000)
	if err := os.WriteFile(path, want, 0o644); err != nil {
		t.Fatal(err)
	}
	data, unmap, err := Open(path)
	if err != nil || !bytes.Equal(data, want) {
		t.Fatalf("Open: %d bytes, %v", len(data), err)
	}
	Drop(data, 0, len(data)) // a hint: the bytes read back the same
	if !bytes.Equal(data, want) {
		t.Fatal("the data changed after Drop")
	}
	if err := unmap(); err != nil {
		t.Fatal(err)
	}

	empty := filepath.Join(dir, "empty.bin")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if data, unmap, err := Open(empty); err != nil || len(data) != 0 || unmap() != nil {
		t.Fatalf("empty file: %d bytes, %v", len(data), err)
	}

	_, _, err = Open(filepath.Join(dir, "missing.bin"))
	if err == nil || strings.Contains(err.Error(), "missing.bin") {
		t.Fatalf("missing file: %v; want an error that leaves the path to the caller", err)
	}
	if Mapped {
		if _, _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Fatalf("a directory: %v", err)
		}
	}
}
