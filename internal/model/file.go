package model

import (
	"errors"
	"fmt"
	"os"

	"github.com/bulkhead-llm/bulkhead/internal/mmapfile"
)

// ErrFileModified is wrapped by CheckFile's error: the model's file was
// written in place while its weights were mapped from it.
var ErrFileModified = errors.New("model file modified in place while its weights are mapped")

// mappedFile is the file a Model's weights are mapped from, held open so
// that CheckFile asks about that very file (fstat), whatever its path
// names later, and as it was when it was mapped.
type mappedFile struct {
	path string
	f    *os.File
	at   os.FileInfo
}

// CheckFile reports whether the weights can still be trusted: it fails,
// wrapping ErrFileModified, once the file they are mapped from has been
// written in place (its size or modification time changed; touch counts).
//
// The mapping is shared with the file, so a write into it changes the
// weights under a running server: outputs turn to garbage. A write that
// shrinks the file (cp over it opens it truncated) makes reads of the
// weights fault; Fault tells a forward pass's recovered panic of that
// kind from a bug, and once one faulted CheckFile always fails. Replacing
// the file by renaming a new one over it, re-pointing a symbolic link, or
// removing it, is safe: the mapping keeps the original, which CheckFile
// goes on watching. A model not mapped from a file (the embedded one)
// passes. The check is one fstat; on file systems whose times are coarse,
// or cached (NFS), it sees a change late or, within one tick of the load,
// not at all.
func (m *Model) CheckFile() error {
	if err := m.faulted.Load(); err != nil {
		return *err
	}
	if m.file == nil {
		return nil
	}
	now, err := m.file.f.Stat()
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrFileModified, m.file.path, err)
	}
	return m.file.compare(now)
}

// compare fails when now, the same file, differs from what was mapped.
func (f *mappedFile) compare(now os.FileInfo) error {
	if now.Size() == f.at.Size() && now.ModTime().Equal(f.at.ModTime()) {
		return nil
	}
	return fmt.Errorf("%w: %s was %d bytes modified %s, and is now %d bytes modified %s; restart to load it, and replace model files by renaming a new file over the old one, never by writing into it",
		ErrFileModified, f.path, f.at.Size(), f.at.ModTime().Format("2006-01-02T15:04:05.000000000Z07:00"),
		now.Size(), now.ModTime().Format("2006-01-02T15:04:05.000000000Z07:00"))
}

// watchFile opens path to watch it for m, as the file m's weights were
// just mapped from, stamped with before, its state before the mapping.
// It fails if path now names another file than before (renamed over
// while loading: what was mapped is unknown) or the file changed since.
func (m *Model) watchFile(path string, before os.FileInfo) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("model %s: %w", path, err)
	}
	now, err := f.Stat()
	if err == nil && !os.SameFile(now, before) {
		err = fmt.Errorf("model %s was replaced while it was being loaded; start again", path)
	}
	if err != nil {
		f.Close()
		return err
	}
	m.file = &mappedFile{path: path, f: f, at: before}
	if err := m.file.compare(now); err != nil {
		m.file = nil
		f.Close()
		return err
	}
	return nil
}

// Fault returns an error wrapping ErrFileModified when r, a value
// recovered from a panic during a forward pass, is a memory fault inside
// the file mapping m's weights alias: the file was cut short under the
// server (cp over it truncates it first). Else it returns nil, and the
// caller should panic on with r. Faults panic rather than kill the
// process only on goroutines that asked (debug.SetPanicOnFault: the
// kernels' workers do, and so must the caller of the forward pass).
//
// A fault is also what a read error of the device looks like (a bad
// sector, a soft NFS mount), with the file's size and time unchanged; so
// the error is kept, and CheckFile returns it from then on: the server's
// watch stops it, instead of a server that stays ready and fails every
// request on the weights it cannot read.
func (m *Model) Fault(r any) error {
	err := mmapfile.Fault(r, m.mapping)
	if err == nil {
		return nil
	}
	path := ""
	if m.file != nil {
		path = m.file.path + ": "
	}
	err = fmt.Errorf("%w: %s%v", ErrFileModified, path, err)
	m.faulted.CompareAndSwap(nil, &err)
	return err
}
