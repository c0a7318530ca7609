/* norm_pool.c — lowerings (being written). */
#include "lower/lower.h"

TPU_LOWERING_TABLE(tpu_lowerings_norm_pool) = {
  TPU_LOWERING_END
};
