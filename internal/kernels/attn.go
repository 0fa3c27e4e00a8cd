package kernels

import "fmt"

// The two kernels below are attention's inner loops over a run of cached
// positions. Calling Dot and Axpy once per position gives the same bits,
// but pays a call and, for Axpy, a load and store of the whole output per
// position; at a 512-token context that was as much time as the weights'
// matrix products of a decode step.

// DotRows sets out[i] = Dot(q, k[i*stride:i*stride+len(q)]) for every i <
// len(out): one head's scores against len(out) keys stored stride floats
// apart, bit for bit what len(out) calls of Dot return.
func DotRows(out, q, k []float32, stride int) {
	n := len(out)
	if n == 0 {
		return
	}
	checkRows("DotRows", len(q), len(k), stride, n)
	if len(q) == 0 {
		clear(out)
		return
	}
	if useSIMD {
		dotRowsSIMD(out, q, k, stride)
		return
	}
	for i := range out {
		out[i] = dotF32Go(q, k[i*stride:i*stride+len(q)])
	}
}

// AxpyRows adds w[i]·v[i*stride+j] to y[j] for j < len(y), for i = 0, 1,
// ... len(w)-1 in turn: bit for bit what len(w) calls of Axpy(y, w[i],
// v[i*stride:]) give, with y held in registers across the rows.
func AxpyRows(y, w, v []float32, stride int) {
	n := len(w)
	if n == 0 || len(y) == 0 {
		return
	}
	checkRows("AxpyRows", len(y), len(v), stride, n)
	if useSIMD {
		axpyRowsSIMD(y, w, v, stride)
		return
	}
	for i, a := range w {
		axpyGo(y, a, v[i*stride:i*stride+len(y)])
	}
}

// checkRows panics unless n rows of width floats, stride apart, fit in
// have floats: the assembly must never read past a slice.
func checkRows(op string, width, have, stride, n int) {
	if stride < width || (n-1)*stride+width > have {
		panic(fmt.Sprintf("kernels: %s of %d rows of %d floats at stride %d needs %d floats, got %d",
			op, n, width, stride, (n-1)*stride+width, have))
	}
}
