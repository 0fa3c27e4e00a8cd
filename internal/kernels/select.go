package kernels

import "fmt"

// Use selects the kernel family by name: "auto", the fastest this CPU
// runs (the default); "avx2", the AVX2 kernels without the AVX-512 VNNI
// ones; or "generic", the pure-Go kernels. Every family gives the same
// bits, so the choice is one of speed: it is there to measure one family
// against another on the same machine and as a way around a CPU whose
// AVX-512 misbehaves. A family this CPU (or build) cannot run is an
// error, as is an unknown name.
//
// Use must be called before any product runs: the kernels read the
// choice without synchronisation.
func Use(name string) error {
	switch name {
	case "auto":
		useSIMD, useVNNI = hasAVX2, hasVNNI
	case "avx2":
		if !hasAVX2 {
			return fmt.Errorf("kernels %q: this CPU or build has no AVX2 kernels (it runs %q)", name, features())
		}
		useSIMD, useVNNI = true, false
	case "generic":
		useSIMD, useVNNI = false, false
	default:
		return fmt.Errorf("kernels %q: unknown family; want auto, avx2 or generic", name)
	}
	return nil
}
