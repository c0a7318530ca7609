// amp_group_norm.cpp — F.group_norm under torch.autocast("tpu") on a bf16 / f16 input: CUDA's fp32 policy
// (computes and returns float32) without a float32 copy of the input.
//
// CUDA's policy (autocast.cpp's op lists) casts the input up and calls group_norm, whose native_group_norm saves
// that f32 copy for backward: twice the bytes of the bf16 tensor it came from (UNet bf16: 22.4 MiB of the step's
// peak). Widening bf16 / f16 to f32 is exact, so a group norm that reads the low-precision input, computes in f32
// and returns f32 gives the bits of group_norm(x.float()), and its backward can keep the low-precision input: its
// d input rounded to the input's dtype is what the cast's backward (a .to(bf16)) gave. So aten::group_norm's
// AutocastPrivateUse1 kernel runs group_norm's own steps (checks, the input made contiguous in its suggested memory
// format) and calls two ops of ours, with native_group_norm(_backward)'s arguments:
//   torch_tpu::group_norm_f32(input, weight?, bias?, N, C, HxW, group, eps) -> (out f32, mean, rstd)
//   torch_tpu::group_norm_f32_backward(grad_out f32, input, mean, rstd, weight?, N, C, HxW, group, output_mask)
//       -> (d input in input's dtype, d weight, d bias)
// - PrivateUse1: the boxed kernel (fallback.cpp); libtpurt lowers both (lower/norm_pool.c: the input read
//   converted to f32, then native_group_norm's lowering; d input rounded by the output's dtype).
// - Meta: native_group_norm(_backward)'s meta functions on the widened input: the boxed kernel's output metadata
//   and FakeTensor's (torch.compile traces the ops into its graphs, which run the same lowerings).
// - Autograd: saves the input as it is; the backward makes grad_out and input contiguous as native_group_norm's
//   derivative does on non-CPU devices (derivatives.yaml), so the gradients are the old path's bits. Double
//   backward (create_graph=True) differentiates native_group_norm on the widened input again (PyTorch's
//   infinitely differentiable formula, as the old path did).
// Inputs that are not low-precision tpu tensors keep CUDA's policy unchanged.
#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <c10/util/accumulate.h>
#include <torch/autograd.h>
#include <torch/library.h>

namespace torch_tpu {
namespace {

using at::Tensor;
using Tensor3 = std::tuple<Tensor, Tensor, Tensor>;
using OptTensor = std::optional<Tensor>;

Tensor3 call_fwd(const Tensor& input, const OptTensor& weight, const OptTensor& bias, c10::SymInt N, c10::SymInt C,
                 c10::SymInt HxW, int64_t group, double eps) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("torch_tpu::group_norm_f32", "")
          .typed<Tensor3(const Tensor&, const OptTensor&, const OptTensor&, c10::SymInt, c10::SymInt, c10::SymInt,
                         int64_t, double)>();
  return op.call(input, weight, bias, std::move(N), std::move(C), std::move(HxW), group, eps);
}

Tensor3 call_bwd(const Tensor& grad_out, const Tensor& input, const Tensor& mean, const Tensor& rstd,
                 const OptTensor& weight, c10::SymInt N, c10::SymInt C, c10::SymInt HxW, int64_t group,
                 std::array<bool, 3> mask) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("torch_tpu::group_norm_f32_backward", "")
                             .typed<Tensor3(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                            const OptTensor&, c10::SymInt, c10::SymInt, c10::SymInt, int64_t,
                                            std::array<bool, 3>)>();
  return op.call(grad_out, input, mean, rstd, weight, std::move(N), std::move(C), std::move(HxW), group, mask);
}

void check_low_precision(const Tensor& input, const char* op) {
  const auto dt = input.scalar_type();
  TORCH_CHECK(dt == at::kBFloat16 || dt == at::kHalf || dt == at::kFloat, op,
              ": expected a bfloat16, float16 or float32 input, but got ", dt);
}

// ---- Meta: native_group_norm(_backward)'s meta functions on the input widened to f32
Tensor3 fwd_meta(const Tensor& input, const OptTensor& weight, const OptTensor& bias, c10::SymInt N, c10::SymInt C,
                 c10::SymInt HxW, int64_t group, double eps) {
  check_low_precision(input, "torch_tpu::group_norm_f32");
  return at::native_group_norm_symint(input.to(at::kFloat), weight, bias, std::move(N), std::move(C),
                                      std::move(HxW), group, eps);
}

Tensor3 bwd_meta(const Tensor& grad_out, const Tensor& input, const Tensor& mean, const Tensor& rstd,
                 const OptTensor& weight, c10::SymInt N, c10::SymInt C, c10::SymInt HxW, int64_t group,
                 std::array<bool, 3> mask) {
  check_low_precision(input, "torch_tpu::group_norm_f32_backward");
  TORCH_CHECK(grad_out.scalar_type() == at::kFloat,
              "torch_tpu::group_norm_f32_backward: expected a float32 grad_out, but got ", grad_out.scalar_type());
  auto [dx, dw, db] = at::native_group_norm_backward_symint(grad_out, input.to(at::kFloat), mean, rstd, weight,
                                                            std::move(N), std::move(C), std::move(HxW), group, mask);
  return {dx.defined() ? dx.to(input.scalar_type()) : dx, dw, db};
}

// ---- Autograd
class GroupNormF32 : public torch::autograd::Function<GroupNormF32> {
 public:
  // weight / bias: nullopt when absent (then needs_input_grad's edges skip them)
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const Tensor& input,
                                                const OptTensor& weight, const OptTensor& bias, c10::SymInt N,
                                                c10::SymInt C, c10::SymInt HxW, int64_t group, double eps) {
    at::AutoDispatchBelowADInplaceOrView below;
    auto [y, mean, rstd] = call_fwd(input, weight, bias, N, C, HxW, group, eps);
    ctx->save_for_backward({input, weight.value_or(Tensor()), mean, rstd});
    ctx->saved_data["has_bias"] = bias.has_value();
    ctx->saved_data["N"] = N;
    ctx->saved_data["C"] = C;
    ctx->saved_data["HxW"] = HxW;
    ctx->saved_data["group"] = group;
    ctx->saved_data["eps"] = eps;
    ctx->mark_non_differentiable({mean, rstd});
    return {y, mean, rstd};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    torch::autograd::variable_list out(8);
    const Tensor& gy = grads[0];
    if (!gy.defined()) return out;
    const auto saved = ctx->get_saved_variables();
    const Tensor &input = saved[0], &weight = saved[1], &mean = saved[2], &rstd = saved[3];
    const c10::SymInt N = ctx->saved_data["N"].toSymInt(), C = ctx->saved_data["C"].toSymInt(),
                      HxW = ctx->saved_data["HxW"].toSymInt();
    const int64_t group = ctx->saved_data["group"].toInt();
    const bool has_b = ctx->saved_data["has_bias"].toBool();
    const std::array<bool, 3> mask = {ctx->needs_input_grad(0), weight.defined() && ctx->needs_input_grad(1),
                                      has_b && ctx->needs_input_grad(weight.defined() ? 2 : 1)};
    const OptTensor w = weight.defined() ? OptTensor(weight) : std::nullopt;
    if (c10::GradMode::is_enabled()) {  // create_graph=True: native_group_norm's own differentiable backward
      std::vector<Tensor> wrt;
      const Tensor x32 = input.to(at::kFloat);
      const Tensor b0 = mask[2] ? at::zeros_symint({C}, x32.options()).requires_grad_() : Tensor();
      if (mask[0]) wrt.push_back(x32);
      if (mask[1]) wrt.push_back(weight);
      if (mask[2]) wrt.push_back(b0);
      if (wrt.empty()) return out;
      const Tensor y = std::get<0>(at::native_group_norm_symint(x32, w, b0.defined() ? OptTensor(b0) : std::nullopt,
                                                                N, C, HxW, group, ctx->saved_data["eps"].toDouble()));
      auto g = torch::autograd::grad({y}, wrt, {gy}, /*retain_graph=*/true, /*create_graph=*/true,
                                     /*allow_unused=*/true);
      size_t k = 0;
      if (mask[0]) out[0] = g[k++].to(input.scalar_type());
      if (mask[1]) out[1] = g[k++];
      if (mask[2]) out[2] = g[k++];
      return out;
    }
    // native_group_norm's derivative on a non-CPU device: grad_out and input made contiguous (NCHW)
    auto [dx, dw, db] = call_bwd(gy.contiguous(), input.contiguous(), mean, rstd, w, N, C, HxW, group, mask);
    out[0] = dx;
    out[1] = dw;
    out[2] = db;
    return out;
  }
};

Tensor3 fwd_autograd(const Tensor& input, const OptTensor& weight, const OptTensor& bias, c10::SymInt N,
                     c10::SymInt C, c10::SymInt HxW, int64_t group, double eps) {
  const auto present = [](const OptTensor& t) { return t.has_value() && t->defined() ? t : std::nullopt; };
  auto r = GroupNormF32::apply(input, present(weight), present(bias), std::move(N), std::move(C), std::move(HxW),
                               group, eps);
  return {r[0], r[1], r[2]};
}

// Forward-mode AD (a dual tensor of torch.autograd.forward_ad, or functorch's jvp / vmap wrappers) takes the old
// path: GroupNormF32 (a C++ custom Function) has no jvp, native_group_norm has one.
bool forward_ad(const OptTensor& t) {
  if (!t.has_value() || !t->defined()) return false;
  constexpr c10::DispatchKeySet kFunctorch({c10::DispatchKey::FuncTorchGradWrapper, c10::DispatchKey::FuncTorchBatched});
  return t->_fw_grad(/*level=*/0).defined() || t->key_set().has_any(kFunctorch);
}

// ---- aten::group_norm's AutocastPrivateUse1 kernel
Tensor group_norm_autocast(const Tensor& input, int64_t num_groups, const OptTensor& weight_opt,
                           const OptTensor& bias_opt, double eps, bool cudnn_enabled) {
  constexpr auto kTpu = c10::DeviceType::PrivateUse1;
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::DispatchKey::AutocastPrivateUse1);
  const OptTensor weight32 = at::autocast::cached_cast(at::kFloat, weight_opt, kTpu);
  const OptTensor bias32 = at::autocast::cached_cast(at::kFloat, bias_opt, kTpu);
  const bool low = at::autocast::is_eligible(input, kTpu) &&
                   (input.scalar_type() == at::kBFloat16 || input.scalar_type() == at::kHalf);
  if (!low || forward_ad(input) || forward_ad(weight_opt) || forward_ad(bias_opt)) {  // CUDA's fp32 policy as it is
    return at::group_norm(at::autocast::cached_cast(at::kFloat, input, kTpu), num_groups, weight32, bias32, eps,
                          cudnn_enabled);
  }
  // aten::group_norm's steps (ATen/native/group_norm.cpp, with its messages), group_norm_f32 for native_group_norm
  const Tensor weight = weight32.value_or(Tensor()), bias = bias32.value_or(Tensor());
  const c10::SymInt N = input.sym_size(0), C = input.sym_size(1);
  TORCH_CHECK(num_groups > 0, "Expected num groups to be greater than 0, got ", num_groups);
  TORCH_CHECK(C % num_groups == 0,
              "Expected number of channels in input to be divisible by num_groups, but got input of shape ",
              input.sizes(), " and num_groups=", num_groups);
  TORCH_CHECK(!weight.defined() || (weight.dim() == 1 && weight.sym_numel() == C),
              "Expected weight to be a vector of size equal to the number of channels in input, but got weight of "
              "shape ",
              weight.sizes(), " and input of shape ", input.sizes());
  TORCH_CHECK(!bias.defined() || (bias.dim() == 1 && bias.sym_numel() == C),
              "Expected bias to be a vector of size equal to the number of channels in input, but got bias of shape ",
              bias.sizes(), " and input of shape ", input.sizes());
  const c10::SymInt HxW = c10::multiply_integers(input.sym_sizes().slice(2));
  const Tensor X = input.contiguous(input.suggest_memory_format());
  const OptTensor gamma = weight.defined() ? OptTensor(weight.contiguous()) : std::nullopt;
  const OptTensor beta = bias.defined() ? OptTensor(bias.contiguous()) : std::nullopt;
  return std::get<0>(call_fwd(X, gamma, beta, N, C, HxW, num_groups, eps));
}

}  // namespace

TORCH_LIBRARY(torch_tpu, m) {
  m.def(
      "group_norm_f32(Tensor input, Tensor? weight, Tensor? bias, SymInt N, SymInt C, SymInt HxW, int group, "
      "float eps) -> (Tensor, Tensor, Tensor)");
  m.def(
      "group_norm_f32_backward(Tensor grad_out, Tensor input, Tensor mean, Tensor rstd, Tensor? weight, SymInt N, "
      "SymInt C, SymInt HxW, int group, bool[3] output_mask) -> (Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(torch_tpu, Meta, m) {
  m.impl("group_norm_f32", TORCH_FN(fwd_meta));
  m.impl("group_norm_f32_backward", TORCH_FN(bwd_meta));
}

TORCH_LIBRARY_IMPL(torch_tpu, Autograd, m) {
  m.impl("group_norm_f32", TORCH_FN(fwd_autograd));
}

// autocast.cpp registers CUDA's policies except group_norm's, which is this
TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
  m.impl(TORCH_SELECTIVE_NAME("aten::group_norm"), TORCH_FN(group_norm_autocast));
}

}  // namespace torch_tpu
