//go:build amd64 && !purego

package kernels

// Multiply-adds one round of each loop in peak_amd64.s stands for.
const (
	peakQ8MACs  = 16 * 4 * 8 // 16 steps of RQ8, each four weights by eight tokens
	peakF32MACs = 16 * 8     // 16 FMAs of eight lanes
)

//go:noescape
func peakQ8Loop(rounds int)

//go:noescape
func peakF32Loop(rounds int)

// peakQ8VNNILoop is peakQ8Loop's 512 multiply-adds a round in
// gemmQ8x16VNNI's instructions, the ceiling of Q8_0 products where that
// kernel runs.
//
//go:noescape
func peakQ8VNNILoop(rounds int)

func peakQ8(rounds int)  { peakQ8Loop(rounds) }
func peakF32(rounds int) { peakF32Loop(rounds) }

// peakQ8_0 is the ceiling loop of Q8_0 weights: their VNNI kernel's where
// it is in use, as it is for prefill.
func peakQ8_0(rounds int) {
	if vnniOn() {
		peakQ8VNNILoop(rounds)
		return
	}
	peakQ8Loop(rounds)
}
