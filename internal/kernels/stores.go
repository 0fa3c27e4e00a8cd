package kernels

// x16Stores routes a sixteen-token kernel's results through a scratch
// buffer when out's token rows are a multiple of 2 KiB apart (ostride a
// multiple of 512 floats: 2048-row products, common in models). The
// kernels store each group of four rows for every token: 64 stores over
// sixteen lines a stride apart, which then land on one or two sets of a
// 32 KiB 8-way L1 and evict each other before the next group of rows
// fills the rest of them. Measured (one thread, 160x768 Q8_0,
// gemmQ8x16VNNI): 335 GFLOP/s at strides of 768, 2064 or 32000 floats,
// 230-250 at 2048. The scratch's stride spreads the lines over the sets,
// and each token's rows then go out in one copy per block of
// x16ScratchRows. Only where the stores are written changes, so the bits
// cannot.
//
// Each thread of a Pool has one (Pool.stores), passed down through
// matRows: the scratch is 17 KiB, and a kernel called through a func
// value would make one on the stack escape to the heap. A nil one stores
// straight into out.
type x16Stores struct {
	scratch [16 * x16ScratchStride]float32
}

// aliasedStores reports whether token rows ostride floats apart alias
// in L1 (a multiple of 2 KiB).
func aliasedStores(ostride int) bool { return ostride%512 == 0 }

// x16ScratchRows is how many rows a kernel call writes into the scratch;
// the stride adds a line so that consecutive tokens start on different
// sets.
const (
	x16ScratchRows   = 256
	x16ScratchStride = x16ScratchRows + 16
)

// A block must start on a group of four rows: vnniTiles finds the block's
// entries of q8NegSums's table, which is in groups of four, at s0/4. This
// fails to compile otherwise.
const _ uint = -(x16ScratchRows % 4)

// run calls k(s0, sr, o, os) to compute rows [s0, s0+sr) of rows rows
// for nt tokens, token t's row s0+j at o[t*os+j]: once over all rows
// straight into out (token t's rows at out[t*ostride:]) when st is nil
// or the stride does not alias, else in blocks of x16ScratchRows through
// the scratch.
func (st *x16Stores) run(rows, nt int, out []float32, ostride int, k func(s0, sr int, o *float32, os int)) {
	if st == nil || !aliasedStores(ostride) {
		k(0, rows, &out[0], ostride)
		return
	}
	for s0 := 0; s0 < rows; s0 += x16ScratchRows {
		sr := min(x16ScratchRows, rows-s0)
		k(s0, sr, &st.scratch[0], x16ScratchStride)
		for t := 0; t < nt; t++ {
			copy(out[t*ostride+s0:t*ostride+s0+sr], st.scratch[t*x16ScratchStride:t*x16ScratchStride+sr])
		}
	}
}
