// Macros shared by the AVX2 kernel files. Their arithmetic is fixed in
// order.go and reproduced by generic.go; see there before changing anything.

// REDUCE8 sums the 8 lanes of YA into the low lane of XA: upper half onto
// lower half, then lanes 2,3 onto 0,1, then lane 1 onto lane 0.
#define REDUCE8(YA, XA, XT) \
	VEXTRACTF128 $1, YA, XT; \
	VADDPS XT, XA, XA; \
	VMOVHLPS XA, XA, XT; \
	VADDPS XT, XA, XA; \
	VMOVSHDUP XA, XT; \
	VADDSS XT, XA, XA

#define REDUCE16(YA, YB, XA, XT) \
	VADDPS YB, YA, YA; \
	REDUCE8(YA, XA, XT)

