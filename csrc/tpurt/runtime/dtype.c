/* dtype.c — element sizes and PyTorch-style names of tpu_dtype_t. */
#include "runtime/runtime.h"

static const struct { size_t size; const char* name; } k_dtypes[] = {
    [TPU_DTYPE_F32] = {4, "float32"}, [TPU_DTYPE_F64] = {8, "float64"},
    [TPU_DTYPE_F16] = {2, "float16"}, [TPU_DTYPE_BF16] = {2, "bfloat16"},
    [TPU_DTYPE_I64] = {8, "int64"},   [TPU_DTYPE_I32] = {4, "int32"},
    [TPU_DTYPE_I16] = {2, "int16"},   [TPU_DTYPE_I8] = {1, "int8"},
    [TPU_DTYPE_U8] = {1, "uint8"},    [TPU_DTYPE_BOOL] = {1, "bool"},
};
_Static_assert(sizeof(k_dtypes) / sizeof(k_dtypes[0]) == TPU_DTYPE_COUNT,
               "k_dtypes out of sync with tpu_dtype_t");

size_t tpu_dtype_size(tpu_dtype_t dtype) {
  return (unsigned)dtype < TPU_DTYPE_COUNT ? k_dtypes[dtype].size : 0;
}

const char* tpu_dtype_name(tpu_dtype_t dtype) {
  return (unsigned)dtype < TPU_DTYPE_COUNT ? k_dtypes[dtype].name : "invalid";
}
