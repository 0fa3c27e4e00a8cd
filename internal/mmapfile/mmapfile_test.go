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
	m, err := Open(path)
	if err != nil || !bytes.Equal(m.Bytes(), want) {
		t.Fatalf("Open: %d bytes, %v", len(m.Bytes()), err)
	}
	m.Drop(0, len(want)) // a hint: the bytes read back the same
	if !bytes.Equal(m.Bytes(), want) {
		t.Fatal("the data changed after Drop")
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil || m.Bytes() != nil {
		t.Fatalf("a second Close: %v, %d bytes left", err, len(m.Bytes()))
	}

	empty := filepath.Join(dir, "empty.bin")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if m, err := Open(empty); err != nil || len(m.Bytes()) != 0 || m.Close() != nil {
		t.Fatalf("empty file: %v", err)
	}

	_, err = Open(filepath.Join(dir, "missing.bin"))
	if err == nil || strings.Contains(err.Error(), "missing.bin") {
		t.Fatalf("missing file: %v; want an error that leaves the path to the caller", err)
	}
	if Mapped {
		if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Fatalf("a directory: %v", err)
		}
	}
}
