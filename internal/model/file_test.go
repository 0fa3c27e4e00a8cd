package model_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/bulkhead-llm/bulkhead/internal/convert"
	"github.com/bulkhead-llm/bulkhead/internal/embedded"
	"github.com/bulkhead-llm/bulkhead/internal/gguf"
	"github.com/bulkhead-llm/bulkhead/internal/model"
)

// writeModelFiles writes a tiny random model as GGUF, and the embedded
// model's llama2.c checkpoint and tokenizer, into dir.
func writeModelFiles(t *testing.T, dir string) (ggufPath, ckpt, tok string) {
	t.Helper()
	var buf bytes.Buffer
	cm, err := convert.Random(convert.Shape{Name: "tiny", Dim: 64, Hidden: 96, Layers: 1, Heads: 4, KVHeads: 2, Vocab: 512, ContextLen: 64}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := gguf.Write(&buf, convert.Metadata(cm, 0), cm.Tensors); err != nil {
		t.Fatal(err)
	}
	ggufPath, ckpt, tok = filepath.Join(dir, "m.gguf"), filepath.Join(dir, "m.bin"), filepath.Join(dir, "tok.bin")
	for path, data := range map[string][]byte{ggufPath: buf.Bytes(), ckpt: embedded.Checkpoint, tok: embedded.Tokenizer} {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return ggufPath, ckpt, tok
}

// A model file written in place under a loaded model (cp over it, say) is
// reported, naming the file and what changed: the weights are mapped from
// it and can no longer be trusted. Renaming another file over it, or
// removing it, leaves the mapped original intact and is not; nor is a
// model with no file.
func TestCheckFile(t *testing.T) {
	dir := t.TempDir()
	ggufPath, ckpt, tok := writeModelFiles(t, dir)
	for _, tc := range []struct{ name, path, tok string }{{"gguf", ggufPath, ""}, {"llama2c", ckpt, tok}} {
		t.Run(tc.name, func(t *testing.T) {
			open := func() *model.Model {
				t.Helper()
				m, err := model.Open(tc.path, tc.tok)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { m.Close() })
				if err := m.CheckFile(); err != nil {
					t.Fatalf("CheckFile of an untouched file: %v", err)
				}
				return m
			}
			orig, err := os.ReadFile(tc.path)
			if err != nil {
				t.Fatal(err)
			}

			// Same size, new contents: only the modification time says so.
			m := open()
			later := time.Now().Add(time.Second)
			if err := os.WriteFile(tc.path, orig, 0o644); err != nil {
				t.Fatal(err)
			}
			os.Chtimes(tc.path, later, later)
			err = m.CheckFile()
			if !errors.Is(err, model.ErrFileModified) || !strings.Contains(err.Error(), tc.path) {
				t.Fatalf("after a rewrite in place: %v; want ErrFileModified naming %s", err, tc.path)
			}

			// Grown: appended to.
			m = open()
			f, err := os.OpenFile(tc.path, os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.Write([]byte{0})
			f.Close()
			if err := m.CheckFile(); !errors.Is(err, model.ErrFileModified) || !strings.Contains(err.Error(), "now") {
				t.Fatalf("after an append: %v; want ErrFileModified", err)
			}
			if err := os.WriteFile(tc.path, orig, 0o644); err != nil {
				t.Fatal(err)
			}

			// Replaced by a rename, then removed: the mapping holds the
			// original.
			m = open()
			other := filepath.Join(dir, "other")
			if err := os.WriteFile(other, append(append([]byte{}, orig...), 0), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(other, tc.path); err != nil {
				t.Fatal(err)
			}
			if err := m.CheckFile(); err != nil {
				t.Fatalf("after a rename over the file: %v", err)
			}
			if err := os.Remove(tc.path); err != nil {
				t.Fatal(err)
			}
			if err := m.CheckFile(); err != nil {
				t.Fatalf("after removing the file: %v", err)
			}
			if err := os.WriteFile(tc.path, orig, 0o644); err != nil {
				t.Fatal(err)
			}
		})
	}
	m, err := model.Open("", "")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.CheckFile(); err != nil {
		t.Fatalf("the embedded model: %v", err)
	}
}

// The check follows the file that was mapped, not its path: re-pointing
// a symbolic link to another model changes nothing, and a write in place
// into the file still mapped, now reached by no link, is still seen.
func TestCheckFileFollowsTheMappedFile(t *testing.T) {
	dir := t.TempDir()
	v1, _, _ := writeModelFiles(t, dir)
	v2 := filepath.Join(dir, "v2.gguf")
	data, err := os.ReadFile(v1)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(v2, data, 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "current.gguf")
	if err := os.Symlink(v1, link); err != nil {
		t.Skipf("symlink: %v", err)
	}
	m, err := model.Open(link, "")
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := os.Remove(link); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(v2, link); err != nil {
		t.Fatal(err)
	}
	if err := m.CheckFile(); err != nil {
		t.Fatalf("after re-pointing the link: %v", err)
	}
	later := time.Now().Add(time.Second)
	if err := os.Chtimes(v1, later, later); err != nil {
		t.Fatal(err)
	}
	if err := m.CheckFile(); !errors.Is(err, model.ErrFileModified) {
		t.Fatalf("after a write into the mapped file: %v; want ErrFileModified", err)
	}
}

// A fault on the mapping (a file cut short, or a page the device could not
// read back, with the file's size and time unchanged) makes CheckFile fail
// from then on, so the server's watch stops it instead of leaving it ready
// and failing every request.
func TestFaultIsSticky(t *testing.T) {
	dir := t.TempDir()
	_, ckpt, tok := writeModelFiles(t, dir)
	m, err := model.Open(ckpt, tok)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	fi, err := os.Stat(ckpt)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(ckpt, 0); err != nil {
		t.Fatal(err)
	}
	r := func() (r any) {
		defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
		defer func() { r = recover() }()
		faultSink += m.Output.Data[len(m.Output.Data)-1]
		return nil
	}()
	if err := m.Fault(r); !errors.Is(err, model.ErrFileModified) {
		t.Fatalf("Fault(%v) = %v; want ErrFileModified", r, err)
	}
	if m.Fault("a bug") != nil || m.Fault(nil) != nil {
		t.Fatal("Fault took a panic that was no fault in the mapping for one")
	}
	// The file as it was, size and time: the fault still counts.
	if err := os.Truncate(ckpt, fi.Size()); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(ckpt, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	if err := m.CheckFile(); !errors.Is(err, model.ErrFileModified) {
		t.Fatalf("CheckFile after a fault, the file restored: %v; want ErrFileModified", err)
	}
}

// faultSink keeps TestFaultIsSticky's read of the weights from being
// optimised away.
var faultSink byte
