//go:build amd64 && !purego

#include "textflag.h"

// func crc3(p *byte, n int) (a, b, c uint32)
//
// Three CRC32C chains, one per third of p[0:3n], interleaved so that the
// CRC32 unit's latency (3 cycles) is hidden: one 8-byte step per cycle in
// all. Each chain prefetches 512 bytes ahead of itself once per 64-byte
// line, since three streams a third apart defeat the hardware prefetcher
// on memory that is not in cache.
TEXT ·crc3(SB), NOSPLIT, $0-28
	MOVQ p+0(FP), SI
	MOVQ n+8(FP), R8
	LEAQ (SI)(R8*1), DI
	LEAQ (DI)(R8*1), R10
	LEAQ (R8)(R8*2), R11 // 3n: the same place in the next three vectors
	MOVL $0xffffffff, AX
	MOVL AX, BX
	MOVL AX, CX
	MOVQ R8, R9
	SHRQ $3, R9 // words per chain

	CMPQ R9, $8
	JB   tail

loop8:
	PREFETCHT0 (SI)(R11*1)
	PREFETCHT0 (DI)(R11*1)
	PREFETCHT0 (R10)(R11*1)
	CRC32Q 0(SI), AX
	CRC32Q 0(DI), BX
	CRC32Q 0(R10), CX
	CRC32Q 8(SI), AX
	CRC32Q 8(DI), BX
	CRC32Q 8(R10), CX
	CRC32Q 16(SI), AX
	CRC32Q 16(DI), BX
	CRC32Q 16(R10), CX
	CRC32Q 24(SI), AX
	CRC32Q 24(DI), BX
	CRC32Q 24(R10), CX
	CRC32Q 32(SI), AX
	CRC32Q 32(DI), BX
	CRC32Q 32(R10), CX
	CRC32Q 40(SI), AX
	CRC32Q 40(DI), BX
	CRC32Q 40(R10), CX
	CRC32Q 48(SI), AX
	CRC32Q 48(DI), BX
	CRC32Q 48(R10), CX
	CRC32Q 56(SI), AX
	CRC32Q 56(DI), BX
	CRC32Q 56(R10), CX
	ADDQ $64, SI
	ADDQ $64, DI
	ADDQ $64, R10
	SUBQ $8, R9
	CMPQ R9, $8
	JAE  loop8

tail:
	TESTQ R9, R9
	JZ    done

tail1:
	CRC32Q (SI), AX
	CRC32Q (DI), BX
	CRC32Q (R10), CX
	ADDQ $8, SI
	ADDQ $8, DI
	ADDQ $8, R10
	DECQ R9
	JNZ  tail1

done:
	NOTL AX
	NOTL BX
	NOTL CX
	MOVL AX, a+16(FP)
	MOVL BX, b+20(FP)
	MOVL CX, c+24(FP)
	RET
