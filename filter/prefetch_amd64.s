#include "textflag.h"

// func prefetch(addr uintptr)
TEXT ·prefetch(SB), NOSPLIT, $0-8
	MOVQ addr+0(FP), AX
	PREFETCHT0 (AX)
	RET

// func prefetchAt(bitsets [][]uint64, off uint64)
TEXT ·prefetchAt(SB), NOSPLIT, $0-32
	MOVQ bitsets_base+0(FP), SI
	MOVQ bitsets_len+8(FP), CX
	MOVQ off+24(FP), DX
	SHLQ $3, DX
	TESTQ CX, CX
	JEQ done
loop:
	MOVQ (SI), AX
	PREFETCHT0 (AX)(DX*1)
	ADDQ $24, SI
	DECQ CX
	JNE loop
done:
	RET
