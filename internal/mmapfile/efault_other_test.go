//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package mmapfile

import "errors"

func efaultErr() error { return errors.New("bad address") }
