// autocast.cpp — torch.autocast("tpu"): the AutocastPrivateUse1 key. Ops without a
// policy fall through; the policies are CUDA's own op lists from ATen/autocast_mode.h
// (AT_FORALL_*), so `with torch.autocast("tpu", dtype=torch.bfloat16)` casts exactly
// what it casts on CUDA (matmuls/convs to the low-precision dtype, reductions and
// numerically sensitive ops to f32, mixed-input ops to the widest type). One exception in
// how, not what: group_norm (fp32 on CUDA) is amp_group_norm.cpp's kernel, which returns f32
// as CUDA does but keeps a bf16 / f16 input as it is for backward instead of an f32 copy.
#include <ATen/autocast_mode.h>
#include <torch/library.h>

#include <cstring>

namespace torch_tpu {
namespace {

at::Tensor binary_cross_entropy_banned(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
                                       int64_t) {
  TORCH_CHECK(false,
              "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast.\n"
              "Many models use a sigmoid layer right before the binary cross entropy layer.\n"
              "In this case, combine the two layers using torch.nn.functional.binary_cross_entropy_with_logits\n"
              "or torch.nn.BCEWithLogitsLoss.  binary_cross_entropy_with_logits and BCEWithLogits are\n"
              "safe to autocast.");
}

}  // namespace

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
  using at::Scalar;  // the op-list macros spell types unqualified
  using at::ScalarType;
  using at::Tensor;
  using c10::IntArrayRef;
#define TPU_KERNEL_LOWER_PRECISION_FP(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define TPU_KERNEL_FP32(...) \
  if (std::strcmp(#__VA_ARGS__, "group_norm") != 0) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define TPU_KERNEL_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define TPU_KERNEL_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
  AT_FORALL_LOWER_PRECISION_FP(TPU_KERNEL_LOWER_PRECISION_FP)
  AT_FORALL_FP32(TPU_KERNEL_FP32)
  AT_FORALL_FP32_SET_OPT_DTYPE(TPU_KERNEL_FP32_SET_OPT_DTYPE)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
  AT_FORALL_PROMOTE(TPU_KERNEL_PROMOTE)
#undef TPU_KERNEL_LOWER_PRECISION_FP
#undef TPU_KERNEL_FP32
#undef TPU_KERNEL_FP32_SET_OPT_DTYPE
#undef TPU_KERNEL_PROMOTE
  m.impl(TORCH_SELECTIVE_NAME("aten::binary_cross_entropy"), TORCH_FN(binary_cross_entropy_banned));
}

}  // namespace torch_tpu
