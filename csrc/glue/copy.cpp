// copy.cpp — _copy_from (cpu<->tpu, tpu<->tpu), _copy_from_and_resize and
// _local_scalar_dense. Data moves only through the runtime's memcpy; layout and
// dtype changes happen either on the CPU side (on CPU memory) or on the device with
// the "aten::copy_" lowering. Never a second copy of any op's semantics.
//
//   cpu -> tpu   dst dense (non-overlapping and dense): build the bytes in dst's
//                layout/dtype on the CPU (src itself when it already matches), then one
//                tpu_rt_memcpy_h2d of the span. Otherwise (dst is a strided view):
//                h2d src into a contiguous tpu temporary and run aten::copy_ on the
//                device. h2d snapshots the host buffer, so non_blocking=True is
//                naturally asynchronous.
//   tpu -> cpu   src dense or nearly so (its element span is at most twice its numel,
//                e.g. transposed or expanded): one tpu_rt_memcpy_d2h of the span, then
//                the layout/dtype change on the CPU. Otherwise aten::copy_ compacts
//                src on the device first. d2h always waits for the device's queue,
//                so it is synchronous even with non_blocking=True.
//   tpu -> tpu   same device: tpu_rt_memcpy_d2d when layouts and dtypes match, else
//                aten::copy_ on the device. Across devices: d2d the (compacted) span
//                into a temporary on dst's device, then as for the same device.
#include <cstring>

#include <ATen/Dispatch_v2.h>
#include <ATen/EmptyTensor.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_strided.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/Scalar.h>
#include <torch/library.h>

#include "glue.h"

namespace torch_tpu {
namespace {

constexpr const char* kCopyOp = "aten::copy_";

bool is_dense(const at::Tensor& t) { return t.is_non_overlapping_and_dense() && !t.is_conj() && !t.is_neg(); }

bool same_layout(const at::Tensor& a, const at::Tensor& b) {
  return a.scalar_type() == b.scalar_type() && a.sizes() == b.sizes() && a.strides() == b.strides();
}

size_t nbytes_of(const at::Tensor& t) { return static_cast<size_t>(t.numel()) * t.element_size(); }

// Elements between the first and the last one addressed (numel > 0, strides >= 0).
int64_t span_elements(const at::Tensor& t) {
  int64_t span = 1;
  for (int64_t d = 0; d < t.dim(); ++d) span += (t.size(d) - 1) * t.stride(d);
  return span;
}

at::Tensor empty_tpu_like_layout(const at::Tensor& t, c10::ScalarType dtype, c10::DeviceIndex device,
                                 bool contiguous) {
  c10::DeviceGuard guard(c10::Device(kTpu, device));
  const auto ks = c10::DispatchKeySet(c10::DispatchKey::PrivateUse1);
  if (contiguous) return at::detail::empty_generic(t.sizes(), tpu_allocator(), ks, dtype, std::nullopt);
  return at::detail::empty_strided_generic(t.sizes(), t.strides(), tpu_allocator(), ks, dtype);
}

// dst.copy_(src) on dst's device with the aten::copy_ lowering (both tpu, same device).
void device_copy(const at::Tensor& dst, const at::Tensor& src, bool non_blocking) {
  tpu_tensor_t records[2];
  fill_tensor_record(dst, &records[0], kCopyOp);
  fill_tensor_record(src, &records[1], kCopyOp);
  const tpu_arg_t args[3] = {tpu_arg_tensor(&records[0]), tpu_arg_tensor(&records[1]), tpu_arg_bool(non_blocking)};
  check_status(tpu_op_run(dst.device().index(), kCopyOp, args, 3, &records[0], 1));
}

void copy_cpu_to_tpu(const at::Tensor& src, const at::Tensor& dst) {
  const int dev = dst.device().index();
  if (is_dense(dst)) {
    at::Tensor host = src;
    if (!(is_dense(src) && same_layout(src, dst))) {
      host = at::detail::empty_strided_cpu(dst.sizes(), dst.strides(), dst.scalar_type());
      host.copy_(src);  // CPU op on CPU memory: layout, dtype, broadcast
    }
    check_status(tpu_rt_memcpy_h2d(dev, dst.data_ptr(), host.const_data_ptr(), nbytes_of(dst)));
    return;
  }
  // dst is a strided view: stage src on the device, scatter there.
  at::Tensor host = src.is_contiguous() && !src.is_conj() && !src.is_neg() ? src : src.contiguous().resolve_conj().resolve_neg();
  at::Tensor staged = empty_tpu_like_layout(host, host.scalar_type(), dev, /*contiguous=*/true);
  check_status(tpu_rt_memcpy_h2d(dev, staged.data_ptr(), host.const_data_ptr(), nbytes_of(host)));
  device_copy(dst, staged, /*non_blocking=*/false);
}

void copy_tpu_to_cpu(const at::Tensor& src, const at::Tensor& dst) {
  const int dev = src.device().index();
  if (is_dense(src) && is_dense(dst) && same_layout(src, dst)) {
    check_status(tpu_rt_memcpy_d2h(dev, dst.data_ptr(), src.const_data_ptr(), nbytes_of(src)));
    return;
  }
  at::Tensor host;
  if (is_dense(src)) {
    host = at::detail::empty_strided_cpu(src.sizes(), src.strides(), src.scalar_type());
    check_status(tpu_rt_memcpy_d2h(dev, host.data_ptr(), src.const_data_ptr(), nbytes_of(src)));
  } else if (!src.is_conj() && !src.is_neg() && span_elements(src) <= 2 * src.numel()) {
    const int64_t span = span_elements(src);
    at::Tensor buffer = at::detail::empty_cpu({span}, src.scalar_type());
    check_status(tpu_rt_memcpy_d2h(dev, buffer.data_ptr(), src.const_data_ptr(),
                                   static_cast<size_t>(span) * src.element_size()));
    host = buffer.as_strided(src.sizes(), src.strides(), 0);
  } else {
    at::Tensor compact = empty_tpu_like_layout(src, src.scalar_type(), dev, /*contiguous=*/true);
    device_copy(compact, src, /*non_blocking=*/false);
    host = at::detail::empty_cpu(src.sizes(), src.scalar_type());
    check_status(tpu_rt_memcpy_d2h(dev, host.data_ptr(), compact.const_data_ptr(), nbytes_of(compact)));
  }
  dst.copy_(host);  // CPU op on CPU memory: layout, dtype, broadcast
}

void copy_tpu_to_tpu(const at::Tensor& src, const at::Tensor& dst, bool non_blocking) {
  const int sdev = src.device().index(), ddev = dst.device().index();
  if (sdev == ddev) {
    if (is_dense(src) && is_dense(dst) && same_layout(src, dst)) {
      if (src.const_data_ptr() == dst.const_data_ptr()) return;
      // While ops are recorded (fused eager, torch.compile capture) the copy is an op of the
      // trace; a direct memcpy would have to flush the trace first.
      if (!tpu_trace_recording(ddev)) {
        check_status(tpu_rt_memcpy_d2d(ddev, dst.data_ptr(), sdev, src.const_data_ptr(), nbytes_of(src)));
        return;
      }
    }
    device_copy(dst, src, non_blocking);
    return;
  }
  at::Tensor from = src;
  if (!is_dense(src)) {
    from = empty_tpu_like_layout(src, src.scalar_type(), sdev, /*contiguous=*/true);
    device_copy(from, src, /*non_blocking=*/false);
  }
  at::Tensor moved = empty_tpu_like_layout(from, from.scalar_type(), ddev, /*contiguous=*/false);
  check_status(tpu_rt_memcpy_d2d(ddev, moved.data_ptr(), sdev, from.const_data_ptr(), nbytes_of(from)));
  copy_tpu_to_tpu(moved, dst, non_blocking);
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  TORCH_CHECK(self.defined() && dst.defined(), "copy_: both tensors must be defined");
  if (dst.numel() == 0) return dst;
  const bool src_tpu = self.device().type() == kTpu, dst_tpu = dst.device().type() == kTpu;
  if (src_tpu && dst_tpu) {
    copy_tpu_to_tpu(self, dst, non_blocking);
  } else if (dst_tpu) {
    TORCH_CHECK(self.device().is_cpu(), "copy_: cannot copy from ", self.device(), " to ", dst.device());
    copy_cpu_to_tpu(self, dst);
  } else {
    TORCH_CHECK(dst.device().is_cpu(), "copy_: cannot copy from ", self.device(), " to ", dst.device());
    copy_tpu_to_cpu(self, dst);
  }
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  if (dst.device().type() == kTpu) {
    resize_tpu_tensor(dst, self.sizes());
  } else if (dst.sizes() != self.sizes()) {
    dst.resize_(self.sizes());
  }
  return copy_from(self, dst, /*non_blocking=*/false);
}

// Reads one element (waits for the device queue; raises a pending async error).
at::Scalar local_scalar_dense(const at::Tensor& self) {
  TORCH_CHECK(self.numel() > 0, "_local_scalar_dense: tensor has no elements");
  alignas(16) unsigned char buf[16];
  const size_t n = self.element_size();
  TORCH_CHECK(n <= sizeof(buf), "_local_scalar_dense: unsupported element size ", n);
  check_status(tpu_rt_memcpy_d2h(self.device().index(), buf, self.const_data_ptr(), n));
  at::Scalar out;
  AT_DISPATCH_V2(
      self.scalar_type(), "_local_scalar_dense_tpu",
      AT_WRAP([&] {
        scalar_t v;
        std::memcpy(&v, buf, sizeof(scalar_t));
        out = at::Scalar(v);
      }),
      AT_EXPAND(AT_ALL_TYPES_AND_COMPLEX), at::kHalf, at::kBool, at::kBFloat16, AT_EXPAND(AT_FLOAT8_TYPES),
      AT_EXPAND(AT_BAREBONES_UNSIGNED_TYPES));
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_copy_from", TORCH_FN(copy_from));
  m.impl("_copy_from_and_resize", TORCH_FN(copy_from_and_resize));
  m.impl("_local_scalar_dense", TORCH_FN(local_scalar_dense));
}

}  // namespace torch_tpu
