// sdpa.cpp — which F.scaled_dot_product_attention backend runs on tpu. PyTorch's
// composite SDPA asks _fused_sdp_choice_stub for the device; we answer "overrideable"
// (the fused flash-style kernel: aten::_scaled_dot_product_fused_attention_overrideable,
// lowered in csrc/tpurt/lower/attention.c) when it applies, else "math" (PyTorch's
// decomposition into matmul/softmax/dropout, which handles every other case).
// torch.nn.attention.sdpa_kernel([SDPBackend.MATH]) forces the math path.
#include <ATen/Context.h>
#include <ATen/SDPBackend.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/transformers/attention.h>
#include <c10/core/GradMode.h>

namespace torch_tpu {
namespace {

bool fused_ok(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const std::optional<at::Tensor>& mask,
              double dropout_p, bool enable_gqa) {
  if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4) return false;
  if (q.is_nested() || k.is_nested() || v.is_nested()) return false;
  const auto dt = q.scalar_type();
  if (dt != at::kFloat && dt != at::kBFloat16 && dt != at::kHalf) return false;
  if (k.scalar_type() != dt || v.scalar_type() != dt) return false;
  if (dropout_p != 0.0) return false;  // the fused kernel has no dropout: math path
  // sym_size: under torch.compile(dynamic=True) sizes are symbolic; size() would specialize them (a recompile
  // for every new batch or sequence length), a symbolic comparison only guards the relation.
  if (q.sym_size(0) != k.sym_size(0) || q.sym_size(0) != v.sym_size(0) || k.sym_size(1) != v.sym_size(1) ||
      k.sym_size(2) != v.sym_size(2) || q.sym_size(3) != k.sym_size(3))
    return false;
  if (q.sym_size(1) != k.sym_size(1) &&
      (!enable_gqa || k.sym_size(1) == 0 || q.sym_size(1) % k.sym_size(1) != 0))
    return false;
  if (mask.has_value() && mask->defined()) {
    if (mask->scalar_type() != at::kBool && mask->scalar_type() != dt) return false;
    if (mask->requires_grad() && c10::GradMode::is_enabled()) return false;  // no bias gradient
    if (mask->dim() > 4) return false;
  }
  return true;
}

int64_t tpu_fused_sdp_choice(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                             const std::optional<at::Tensor>& mask, double dropout_p, bool is_causal,
                             std::optional<double> scale, bool enable_gqa) {
  auto& ctx = at::globalContext();
  if (ctx.userEnabledOverrideableSDP() && fused_ok(q, k, v, mask, dropout_p, enable_gqa))
    return static_cast<int64_t>(at::SDPBackend::overrideable);
  if (ctx.userEnabledMathSDP()) return static_cast<int64_t>(at::SDPBackend::math);
  return static_cast<int64_t>(at::SDPBackend::error);
}

}  // namespace
}  // namespace torch_tpu

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &torch_tpu::tpu_fused_sdp_choice)
}
