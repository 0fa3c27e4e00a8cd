//go:build !amd64 || purego

package transfer

const haveCRC3 = false

func crc3(p *byte, n int) (a, b, c uint32) { panic("crc3 without CRC32C instructions") }

func crcCopy3(dst, src *byte, n int) (a, b, c uint32) {
	panic("crcCopy3 without CRC32C instructions")
}
