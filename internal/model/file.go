package model

import (
	"errors"
	"fmt"
	"os"
)

// ErrFileModified is wrapped by CheckFile's error: the model's file was
// written in place while its weights were mapped from it.
var ErrFileModified = errors.New("model file modified in place while its weights are mapped")

// mappedFile is the file a Model's weights are mapped from, as it was when
// they were.
type mappedFile struct {
	path string
	at   os.FileInfo
}

// CheckFile reports whether the weights can still be trusted: it fails,
// wrapping ErrFileModified, once the file they are mapped from has been
// written in place (its size or modification time changed).
//
// The mapping is shared with the file, so a write into it (cp over the
// old file, a download resumed onto it) changes the weights under a
// running server: outputs turn to garbage, and reads past a new, shorter
// end kill the process with SIGBUS. Replacing the file by renaming a new
// one over it, or removing it, is safe: the mapping keeps the original,
// which no path reaches any more, so CheckFile does not object. A model
// not mapped from a file (the embedded one) always passes.
func (m *Model) CheckFile() error {
	if m.file == nil {
		return nil
	}
	now, err := os.Stat(m.file.path)
	if err != nil || !os.SameFile(now, m.file.at) {
		return nil // removed or replaced: the mapped original is intact
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
