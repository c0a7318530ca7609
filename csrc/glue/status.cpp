// status.cpp — tpu_status_t -> c10 exception (see status.h for the table).
#include "status.h"

#include <string>

#include <c10/util/Exception.h>

namespace torch_tpu {

void throw_status(tpu_status_t status, const char* context) {
  const tpu_status_code_t code = tpu_status_code(status);
  std::string msg;
  if (context != nullptr && context[0] != '\0') {
    msg += context;
    msg += ": ";
  }
  msg += tpu_status_message(status);
  tpu_status_free(status);
  switch (code) {
    case TPU_STATUS_TYPE_ERROR:
      C10_THROW_ERROR(TypeError, msg);
    case TPU_STATUS_INDEX_ERROR:
      C10_THROW_ERROR(IndexError, msg);
    case TPU_STATUS_OUT_OF_MEMORY:
      C10_THROW_ERROR(OutOfMemoryError, msg);
    case TPU_STATUS_UNSUPPORTED:
      C10_THROW_ERROR(NotImplementedError, msg);
    case TPU_STATUS_LINALG_ERROR:  // a subclass of RuntimeError, as CPU raises it
      C10_THROW_ERROR(LinAlgError, msg);
    case TPU_STATUS_INTERNAL:
      C10_THROW_ERROR(Error, "internal error in libtpurt (please report): " + msg);
    case TPU_STATUS_INVALID_ARGUMENT:
    default:
      C10_THROW_ERROR(Error, msg);
  }
}

}  // namespace torch_tpu
