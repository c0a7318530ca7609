/* TEMPORARY stub: replaced by the real lowering registry. */
#include "common/common.h"
bool tpu_op_supported(const char* op_name) { (void)op_name; return false; }
tpu_status_t tpu_op_run(int device, const char* op_name, const tpu_arg_t* args, int nargs,
                        const tpu_tensor_t* outs, int nouts) {
  return TPU_ERR(UNSUPPORTED, "%s: not implemented", op_name);
}
tpu_status_t tpu_op_infer(int device, const char* op_name, const tpu_arg_t* args, int nargs,
                          tpu_tensor_t* out_meta, int max_outs, int* out_nouts) {
  return TPU_ERR(UNSUPPORTED, "%s: no shape rule", op_name);
}
