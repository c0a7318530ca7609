/* conv.c — lowerings (being written). */
#include "lower/lower.h"

TPU_LOWERING_TABLE(tpu_lowerings_conv) = {
  TPU_LOWERING_END
};
