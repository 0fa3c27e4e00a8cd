//go:build amd64 && !purego

package kernels

import "unsafe"

// AVX-512 VNNI twins of the one- to four-token Q8_0 kernels
// (simd_q8vnni_amd64.s). Each takes exactly its AVX2 twin's arguments and
// writes the same bits; they need AVX512F, AVX512VL, AVX512BW and
// AVX512VNNI besides AVX2. They take weights of -128 as the AVX2 ones do,
// and activations of -128 too, which the AVX2 ones cannot (quantizeX
// never makes them).

// matQ8x1VNNI is matQ8x1 on VNNI.
//
//go:noescape
func matQ8x1VNNI(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, nb int, out *float32)

// matQ8x2VNNI is matQ8x2 on VNNI.
//
//go:noescape
func matQ8x2VNNI(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)

// matQ8x4VNNI is matQ8x4 on VNNI.
//
//go:noescape
func matQ8x4VNNI(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)

// matQ8x1sVNNI is matQ8x1s on VNNI: four streams of rows rows, stride
// bytes apart, with matQ8x1s's non-temporal prefetch.
//
//go:noescape
func matQ8x1sVNNI(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, nb int, out *float32, stride int)

// matQ8x2sVNNI is matQ8x2s on VNNI.
//
//go:noescape
func matQ8x2sVNNI(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int, stride int)

// matQ4x1VNNI, matQ4x2VNNI and matQ4x4VNNI are matQ4x1, matQ4x2 and
// matQ4x4 on VNNI (simd_q4vnni_amd64.s): the same arguments and bits.
//
//go:noescape
func matQ4x1VNNI(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, nb int, out *float32)

//go:noescape
func matQ4x2VNNI(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)

//go:noescape
func matQ4x4VNNI(w unsafe.Pointer, rowBytes, rows int, xb unsafe.Pointer, xstride, nb int, out *float32, ostride int)
