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

func peakQ8(rounds int)  { peakQ8Loop(rounds) }
func peakF32(rounds int) { peakF32Loop(rounds) }
