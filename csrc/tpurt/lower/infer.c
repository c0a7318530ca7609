/* infer.c — output shapes of data-dependent ops (nonzero, masked_select, ...). */
#include "lower/lower.h"

tpu_status_t tpu_op_infer(int device, const char* op_name, const tpu_arg_t* args, int nargs,
                          tpu_tensor_t* out_meta, int max_outs, int* out_nouts) {
  return TPU_ERR(UNSUPPORTED, "%s: no data-dependent shape rule", op_name);
}
