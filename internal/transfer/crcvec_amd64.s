//go:build amd64 && !purego

#include "textflag.h"

// CHAINS sets up three CRC32C chains over the n-byte vectors (n in R8)
// that start at SI: DI and R10 the second and third, R11 3n (the same
// place in the next three vectors, for prefetch), AX, BX, CX the CRCs'
// initial value, R9 the 8-byte words per chain.
#define CHAINS \
	LEAQ (SI)(R8*1), DI; \
	LEAQ (DI)(R8*1), R10; \
	LEAQ (R8)(R8*2), R11; \
	MOVL $0xffffffff, AX; \
	MOVL AX, BX; \
	MOVL AX, CX; \
	MOVQ R8, R9; \
	SHRQ $3, R9

// PREFETCH3 fetches each chain's place in the next three vectors.
#define PREFETCH3 \
	PREFETCHT0 (SI)(R11*1); \
	PREFETCHT0 (DI)(R11*1); \
	PREFETCHT0 (R10)(R11*1)

// ADVANCE3 moves the three chains on by n bytes.
#define ADVANCE3(n) \
	ADDQ n, SI; \
	ADDQ n, DI; \
	ADDQ n, R10

// RESULTS3 finishes the three CRCs and stores them.
#define RESULTS3(a, b, c) \
	NOTL AX; \
	NOTL BX; \
	NOTL CX; \
	MOVL AX, a; \
	MOVL BX, b; \
	MOVL CX, c

// CSUM folds the 8-byte word at offset off of each of the three chains
// (SI, DI, R10) into its CRC (AX, BX, CX).
#define CSUM(off) \
	CRC32Q off(SI), AX; \
	CRC32Q off(DI), BX; \
	CRC32Q off(R10), CX

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
	CHAINS

	CMPQ R9, $8
	JB   tail

loop8:
	PREFETCH3
	CSUM(0)
	CSUM(8)
	CSUM(16)
	CSUM(24)
	CSUM(32)
	CSUM(40)
	CSUM(48)
	CSUM(56)
	ADVANCE3($64)
	SUBQ $8, R9
	CMPQ R9, $8
	JAE  loop8

tail:
	TESTQ R9, R9
	JZ    done

tail1:
	CSUM(0)
	ADVANCE3($8)
	DECQ R9
	JNZ  tail1

done:
	RESULTS3(a+16(FP), b+20(FP), c+24(FP))
	RET

// CSTEP is one 8-byte word of each of crcCopy3's three chains, at
// offset off: loaded once, folded into the chain's CRC, stored to dst
// (R13 is dst - src) without going through the cache.
#define CSTEP(off) \
	MOVQ off(SI), R12; \
	MOVQ off(DI), R14; \
	MOVQ off(R10), R15; \
	CRC32Q R12, AX; \
	CRC32Q R14, BX; \
	CRC32Q R15, CX; \
	MOVNTIQ R12, off(SI)(R13*1); \
	MOVNTIQ R14, off(DI)(R13*1); \
	MOVNTIQ R15, off(R10)(R13*1)

// func crcCopy3(dst, src *byte, n int) (a, b, c uint32)
//
// crc3 of src[0:3n] that also copies it to dst[0:3n], with non-temporal
// stores: the copy's destination is KV pages that will not be read again
// until decode attends over them, long after they have left the cache,
// so a plain copy would first read every destination line into the cache
// only to overwrite it. Each 8-byte word is loaded once, into a register
// that both the CRC32 instruction and the store take. SFENCE at the end
// orders the weakly-ordered stores before anything this goroutine does
// next (the fold's bookkeeping, and the WriteDone that lets the sequence
// be read). n is a multiple of 8, at least 64.
TEXT ·crcCopy3(SB), NOSPLIT, $0-36
	MOVQ dst+0(FP), R13
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), R8
	SUBQ SI, R13 // dst - src: one offset serves the three chains
	CHAINS

	CMPQ R9, $4
	JB   ctail

cloop4:
	PREFETCH3
	CSTEP(0)
	CSTEP(8)
	CSTEP(16)
	CSTEP(24)
	ADVANCE3($32)
	SUBQ $4, R9
	CMPQ R9, $4
	JAE  cloop4

ctail:
	TESTQ R9, R9
	JZ    cdone

ctail1:
	CSTEP(0)
	ADVANCE3($8)
	DECQ R9
	JNZ  ctail1

cdone:
	SFENCE
	RESULTS3(a+24(FP), b+28(FP), c+32(FP))
	RET
