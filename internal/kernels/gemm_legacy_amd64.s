//go:build amd64 && !purego

#include "textflag.h"
#include "simd_amd64.h"
#include "simd_legacy_amd64.h"
#include "gemm_kquant_amd64.h"

#include "gemm_legacy_amd64.h"

// The AVX2 kernels: the body and its steps are gemm_legacy_amd64.h's.

// func gemmQ40x8(w unsafe.Pointer, rowBytes, rows int, xi unsafe.Pointer, nb int, out *float32, ostride, ntok int)
// writes out[t*ostride/4 + r] for r < rows, t < ntok (ostride in bytes).
TEXT ·gemmQ40x8(SB), 0, $288-64
	GL_KERNEL(GL_W40, GL_SUM4, GL_FIN40, $18, $72, g40Group, g40Block, g40Store, g40Rows, g40Row, g40Tok, g40Done)

// func gemmQ41x8(w unsafe.Pointer, rowBytes, rows int, xi unsafe.Pointer, nb int, out *float32, ostride, ntok int)
TEXT ·gemmQ41x8(SB), 0, $288-64
	GL_KERNEL(GL_W41, GL_SUM4, GL_FINM, $20, $80, g41Group, g41Block, g41Store, g41Rows, g41Row, g41Tok, g41Done)

// func gemmQ50x8(w unsafe.Pointer, rowBytes, rows int, xi unsafe.Pointer, nb int, out *float32, ostride, ntok int)
TEXT ·gemmQ50x8(SB), 0, $288-64
	GL_KERNEL(GL_W50, GL_SUM5, GL_FIN0, $22, $88, g50Group, g50Block, g50Store, g50Rows, g50Row, g50Tok, g50Done)

// func gemmQ51x8(w unsafe.Pointer, rowBytes, rows int, xi unsafe.Pointer, nb int, out *float32, ostride, ntok int)
TEXT ·gemmQ51x8(SB), 0, $288-64
	GL_KERNEL(WEIGHTS_Q51, GL_SUM5, GL_FINM, $24, $96, g51Group, g51Block, g51Store, g51Rows, g51Row, g51Tok, g51Done)
