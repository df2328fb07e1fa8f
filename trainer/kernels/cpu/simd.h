#pragma once
// LOCKSTEP_SIMD_CLONES before a function with hot element loops compiles it three times: for
// baseline x86-64 (SSE2), x86-64-v3 (AVX2, FMA) and x86-64-v4 (AVX-512), and the loader picks
// the one the CPU runs (GCC's function multiversioning, an ifunc). The binary stays portable
// (no -march) while its element loops run at the machine's vector width: swish over a million
// floats took 5.0 ms with SSE2, 0.9 ms with AVX2 and 0.5 ms with AVX-512 on the development
// machine. Loops vectorise only where GCC can if-convert them: the element code has no calls
// (see graph::Exp), no conditional loads, and the library builds with -fno-trapping-math.
// Inline functions called from such a function are compiled for its target too.

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(LOCKSTEP_NO_SIMD_CLONES)
#define LOCKSTEP_SIMD_CLONES \
  __attribute__((target_clones("default", "arch=x86-64-v3", "arch=x86-64-v4")))
#else
#define LOCKSTEP_SIMD_CLONES
#endif
