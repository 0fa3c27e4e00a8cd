//go:build amd64 && !purego

package kernels

// The F16 attention kernels (simd_attn_f16_amd64.s) are headScoresAVX2 and
// headAccumAVX2 with each key or value load widened by VCVTPH2PS; strides
// are in bytes, two per element of the cache.

//go:noescape
func headScoresF16AVX2(out *float32, outStrideBytes int, q *float32, hd int, k *uint16, strideBytes int, koff *int32, nh, rows int)

//go:noescape
func headAccumF16AVX2(o *float32, hd int, w *float32, wStrideBytes int, v *uint16, strideBytes int, voff *int32, nh, rows int)

//go:noescape
func toF16AVX2(dst *uint16, src *float32, n int)

//go:noescape
func fromF16AVX2(dst *float32, src *uint16, n int)

func headScoresF16SIMD(out []float32, outStride int, q []float32, hd int, k []uint16, stride int, koff []int32, rows int) {
	headScoresF16AVX2(&out[0], outStride*4, &q[0], hd, &k[0], stride*2, &koff[0], len(koff), rows)
}

func headAccumF16SIMD(o []float32, hd int, w []float32, wStride int, v []uint16, stride int, voff []int32, rows int) {
	headAccumF16AVX2(&o[0], hd, &w[0], wStride*4, &v[0], stride*2, &voff[0], len(voff), rows)
}

// toF16SIMD converts the longest multiple of 8 of src and returns how many
// it converted; the caller converts the rest.
func toF16SIMD(dst []uint16, src []float32) int {
	n := len(src) &^ 7
	if n > 0 {
		_ = dst[n-1]
		toF16AVX2(&dst[0], &src[0], n)
	}
	return n
}

// fromF16SIMD is toF16SIMD's inverse.
func fromF16SIMD(dst []float32, src []uint16) int {
	n := len(src) &^ 7
	if n > 0 {
		_ = dst[n-1]
		fromF16AVX2(&dst[0], &src[0], n)
	}
	return n
}
