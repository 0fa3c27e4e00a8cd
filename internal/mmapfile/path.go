package mmapfile

import (
	"errors"
	"io/fs"
)

// withoutPath drops the path from an *fs.PathError, which the caller's
// own prefix already names: "llama2c m.bin: no such file or directory",
// not "llama2c m.bin: open m.bin: no such file or directory".
func withoutPath(err error) error {
	if pe, ok := errors.AsType[*fs.PathError](err); ok {
		return pe.Err
	}
	return err
}
