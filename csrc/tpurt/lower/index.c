/* index.c — lowerings (being written). */
#include "lower/lower.h"

TPU_LOWERING_TABLE(tpu_lowerings_index) = {
  TPU_LOWERING_END
};
