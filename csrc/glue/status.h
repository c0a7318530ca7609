// status.h — the ONE place a tpu_status_t becomes a PyTorch exception.
//
//   INVALID_ARGUMENT, INTERNAL -> c10::Error             (RuntimeError)
//   TYPE_ERROR                 -> c10::TypeError         (TypeError)
//   INDEX_ERROR                -> c10::IndexError        (IndexError)
//   OUT_OF_MEMORY              -> c10::OutOfMemoryError  (torch.OutOfMemoryError)
//   UNSUPPORTED                -> c10::NotImplementedError (NotImplementedError)
//
// The dispatcher and torch's Python bindings turn these c10 exceptions into the
// Python exceptions in parentheses; module.cpp does the same for its own functions.
#pragma once

#include <tpurt.h>

#include <c10/macros/Macros.h>

namespace torch_tpu {

// Frees `status` (must be non-NULL) and throws the matching c10 exception. The
// message is the C message, prefixed with `context` when given.
[[noreturn]] void throw_status(tpu_status_t status, const char* context = nullptr);

// Throws if `status` is not TPU_OK (frees it first). Inline so that the success path
// is one compare.
inline void check_status(tpu_status_t status, const char* context = nullptr) {
  if (C10_UNLIKELY(status != TPU_OK)) throw_status(status, context);
}

}  // namespace torch_tpu
