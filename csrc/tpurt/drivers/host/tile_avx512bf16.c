/* AVX-512 + AVX512-BF16 build of the tile kernels (Makefile adds -mavx512bf16 to the AVX-512 flags for
 * *_avx512bf16.c); selected at run time only when tpu_cpu_has_avx512bf16(). The same source as the other
 * ISAs (tile_impl.h); only the f32 -> bf16 stores and in-register roundings differ in how (vcvtne2ps2bf16),
 * not in what: the same bits (tests/test_tile_convert.c, tests/test_tile.c). */
#define TILE_SUFFIX _avx512bf16
#include "drivers/host/tile_impl.h"
