/* AVX-512 build of the tile kernels (Makefile adds -mavx512f -mavx512bw -mavx512vl -mavx2 -mfma -mf16c
 * for *_avx512.c); selected at run time only when the CPU has AVX-512F (and AVX2+FMA). The source is
 * tile_impl.h, as for the other ISAs; -ffp-contract=off keeps the results bit-identical to them. */
#define TILE_SUFFIX _avx512
#include "drivers/host/tile_impl.h"
