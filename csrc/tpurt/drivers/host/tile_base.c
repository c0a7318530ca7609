/* Portable (baseline ISA) build of the tile kernels. */
#define TILE_SUFFIX _base
#include "drivers/host/tile_impl.h"
