//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package mmapfile

import "golang.org/x/sys/unix"

func efaultErr() error { return unix.EFAULT }
