/* AVX2+FMA build of the tile kernels (Makefile adds -mavx2 -mfma -mf16c for *_avx2.c);
 * selected at run time only when the CPU has AVX2 and FMA. */
#define TILE_SUFFIX _avx2
#include "drivers/host/tile_impl.h"
