// tensor_factory.cpp — tensor creation and the metadata-only ops (views, resize_,
// set_) for tpu. None of these touch tensor data on the host: storages grow by
// allocating a new device buffer and copying the old bytes on the device.
//
// Views: every aten op that returns an alias (schema `Tensor(a)`) must be either
// composite or registered here, because the boxed fallback would copy. In
// torch 2.13 the non-composite ones with dense CPU kernels are as_strided, view,
// _reshape_alias, unfold, view_as_real, view_as_complex (found by scanning
// torch._C._jit_get_all_schemas() against _dispatch_has_kernel_for_dispatch_key);
// expand, permute, transpose, select, slice, squeeze, unsqueeze, t, narrow,
// diagonal, alias, detach, split, unbind, _unsafe_view, view.dtype are composite.
#include <ATen/EmptyTensor.h>
#include <ATen/InferSize.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/Resize.h>
#include <ATen/native/TensorFactories.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/is_set_to_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/StorageImpl.h>
#include <c10/core/TensorOptions.h>
#include <torch/library.h>

#include "glue.h"

namespace torch_tpu {

// ---------------------------------------------------------------- storage growth

void resize_storage_bytes(c10::StorageImpl* storage, size_t new_nbytes) {
  TORCH_CHECK(storage->resizable(), "Trying to resize storage that is not resizable");
  const size_t old_nbytes = storage->nbytes();
  const c10::Device device = storage->device();
  const c10::DeviceIndex index = device.type() == kTpu && device.index() >= 0 ? device.index() : current_device();
  c10::DeviceGuard guard(c10::Device(kTpu, index));
  c10::Allocator* allocator = storage->allocator() != nullptr ? storage->allocator() : tpu_allocator();
  c10::DataPtr fresh = allocator->allocate(new_nbytes);
  const size_t keep = std::min(old_nbytes, new_nbytes);
  if (keep > 0 && storage->data() != nullptr && fresh.get() != nullptr) {
    // Enqueued on the device's queue; the old block is only reused by work enqueued
    // after it is freed below, so the copy reads valid bytes.
    check_status(tpu_rt_memcpy_d2d(index, fresh.get(), index, storage->data(), keep));
  }
  storage->set_data_ptr_noswap(std::move(fresh));
  storage->set_nbytes(new_nbytes);
}

namespace {

void grow_storage_if_needed(c10::TensorImpl* impl, size_t needed_nbytes) {
  if (impl->numel() == 0) return;  // as on CPU: an empty tensor never resizes its storage
  const c10::Storage& storage = impl->unsafe_storage();
  if (!storage) {
    c10::DeviceGuard guard(impl->device());
    impl->set_storage_keep_dtype(c10::Storage(c10::Storage::use_byte_size_t(), needed_nbytes, tpu_allocator(),
                                              /*resizable=*/true));
  } else if (needed_nbytes > storage.nbytes()) {
    resize_storage_bytes(storage.unsafeGetStorageImpl(), needed_nbytes);
  }
}

// at::native::resize_impl_cpu_, with the storage grown on the device.
void resize_impl(c10::TensorImpl* impl, c10::IntArrayRef size, at::OptionalIntArrayRef stride) {
  if (impl->sizes() == size && (!stride || impl->strides() == *stride)) return;
  const size_t itemsize = impl->dtype().itemsize();
  const int64_t offset = impl->storage_offset();
  size_t nbytes;
  if (stride) {
    impl->set_sizes_and_strides(size, *stride);
    nbytes = at::detail::computeStorageNbytes(size, *stride, itemsize, offset);
  } else {
    impl->set_sizes_contiguous(size);
    nbytes = at::detail::computeStorageNbytesContiguous(size, itemsize, offset);
  }
  grow_storage_if_needed(impl, nbytes);
}

void check_tpu_options(std::optional<c10::Layout> layout, std::optional<bool> pin_memory) {
  TORCH_CHECK(c10::layout_or_default(layout) == c10::Layout::Strided,
              "tpu tensors only support the strided layout, got ", c10::layout_or_default(layout));
  TORCH_CHECK(!c10::pinned_memory_or_default(pin_memory), "Only dense CPU tensors can be pinned");
}

}  // namespace

void resize_tpu_tensor(const at::Tensor& self, c10::IntArrayRef sizes, c10::IntArrayRef strides) {
  resize_impl(self.unsafeGetTensorImpl(), sizes,
              strides.empty() ? at::OptionalIntArrayRef() : at::OptionalIntArrayRef(strides));
}

// ---------------------------------------------------------------- factories

namespace {

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                               std::optional<bool> pin_memory, std::optional<c10::MemoryFormat> memory_format) {
  check_tpu_options(layout, pin_memory);
  const c10::Device d = c10::device_or_default(device);
  TORCH_CHECK(d.type() == kTpu, "tpu empty: expected a tpu device, got ", d);
  c10::DeviceGuard guard(d);
  return at::detail::empty_generic(size, tpu_allocator(), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                   c10::dtype_or_default(dtype), memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<c10::ScalarType> dtype,
                         std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                         std::optional<bool> pin_memory) {
  check_tpu_options(layout, pin_memory);
  const c10::Device d = c10::device_or_default(device);
  TORCH_CHECK(d.type() == kTpu, "tpu empty_strided: expected a tpu device, got ", d);
  c10::DeviceGuard guard(d);
  return at::detail::empty_strided_generic(size, stride, tpu_allocator(),
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                           c10::dtype_or_default(dtype));
}

// Forward-mode AD's zero tangents (as on CPU / CUDA): a tensor with the ZeroTensor key and no storage bytes;
// the ZeroTensor fallback materializes it (as tpu zeros) for any op without a ZeroTensor kernel.
at::Tensor efficientzerotensor(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                               std::optional<bool> pin_memory) {
  check_tpu_options(layout, pin_memory);
  const c10::Device d = c10::device_or_default(device);
  TORCH_CHECK(d.type() == kTpu, "tpu _efficientzerotensor: expected a tpu device, got ", d);
  at::native::ZeroTensorAllocator zeros(c10::Device(kTpu, d.has_index() ? d.index() : current_device()));
  const auto keys = c10::DispatchKeySet(c10::DispatchKey::PrivateUse1) | c10::DispatchKeySet(c10::DispatchKey::ZeroTensor);
  return at::detail::empty_generic(size, &zeros, keys, c10::dtype_or_default(dtype), std::nullopt);
}

// ---------------------------------------------------------------- views

at::Tensor as_strided(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride,
                      std::optional<int64_t> storage_offset) {
  return at::native::as_strided_tensorimpl(self, size, stride, storage_offset);
}

at::Tensor view(const at::Tensor& self, c10::IntArrayRef size) { return at::native::view(self, size); }

at::Tensor reshape_alias(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride) {
  return at::native::_reshape_alias(self, size, stride);
}

at::Tensor unfold(const at::Tensor& self, int64_t dimension, int64_t size, int64_t step) {
  return at::native::unfold(self, dimension, size, step);
}

at::Tensor view_as_real(const at::Tensor& self) { return at::native::view_as_real(self); }
at::Tensor view_as_complex(const at::Tensor& self) { return at::native::view_as_complex(self); }

bool is_set_to(const at::Tensor& self, const at::Tensor& other) { return at::native::is_set_to(self, other); }

// ---------------------------------------------------------------- resize_ / set_

const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size,
                          std::optional<c10::MemoryFormat> memory_format) {
  c10::TensorImpl* impl = self.unsafeGetTensorImpl();
  resize_impl(impl, size, std::nullopt);
  if (memory_format.has_value()) {
    TORCH_CHECK(*memory_format != c10::MemoryFormat::Preserve, "Unsupported memory format", *memory_format);
    impl->empty_tensor_restride(*memory_format);
  }
  return self;
}

const at::Tensor& resize_output_(const at::Tensor& self, c10::IntArrayRef size, c10::Device device) {
  TORCH_CHECK(self.device() == device, "out Tensor doesn't have the correct device set");
  if (self.sizes() != size) resize_(self, size, std::nullopt);
  return self;
}

at::Tensor& set_storage_offset_(at::Tensor& self, c10::Storage source, int64_t storage_offset,
                                c10::IntArrayRef size, c10::IntArrayRef stride) {
  // An empty stride list means "contiguous" (the schema default is []).
  const c10::IntArrayRef strides = stride.empty() ? c10::IntArrayRef() : stride;
  at::native::checkSetStorage(self, std::move(source), storage_offset, size, strides);
  self.unsafeGetTensorImpl()->set_storage_offset(storage_offset);
  resize_impl(self.unsafeGetTensorImpl(), size,
              strides.data() != nullptr ? at::OptionalIntArrayRef(strides) : at::OptionalIntArrayRef());
  return self;
}

at::Tensor& set_storage_(at::Tensor& self, c10::Storage source) {
  const int64_t itemsize = static_cast<int64_t>(self.dtype().itemsize());
  const int64_t numel = static_cast<int64_t>(source.nbytes()) / itemsize;
  return set_storage_offset_(self, std::move(source), 0, {numel}, {});
}

at::Tensor& set_tensor_(at::Tensor& self, const at::Tensor& source) {
  if (self.unsafeGetTensorImpl() == source.unsafeGetTensorImpl()) return self;
  return set_storage_offset_(self, source.storage(), source.storage_offset(), source.sizes(), source.strides());
}

at::Tensor& set_empty_(at::Tensor& self) {
  c10::DeviceGuard guard(self.device());
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, tpu_allocator(), /*resizable=*/true);
  return set_storage_offset_(self, std::move(storage), 0, {0}, {});
}

void record_stream(at::Tensor&, c10::Stream) {}  // one queue per device: nothing to record

// ATen's composite version treats only its built-in dense backends (CPU, CUDA, ...) as
// compatible, so Module.to("tpu") replaced every Parameter with a new one and silently
// untied shared weights. Plain strided CPU and tpu tensors are the same TensorImpl class,
// so `param.data = tpu_tensor` (what Module._apply does for CUDA) is safe here too.
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  auto plain = [](const at::Tensor& t) {
    return t.layout() == c10::kStrided && !t.is_quantized() && !t.is_nested() &&
           (t.device().type() == c10::DeviceType::CPU || t.device().type() == c10::DeviceType::PrivateUse1) &&
           typeid(*t.unsafeGetTensorImpl()) == typeid(c10::TensorImpl);
  };
  return plain(self) && plain(from);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(empty_memory_format));
  m.impl("empty_strided", TORCH_FN(empty_strided));
  m.impl("_efficientzerotensor", TORCH_FN(efficientzerotensor));
  m.impl("as_strided", TORCH_FN(as_strided));
  m.impl("view", TORCH_FN(view));
  m.impl("_reshape_alias", TORCH_FN(reshape_alias));
  m.impl("unfold", TORCH_FN(unfold));
  m.impl("view_as_real", TORCH_FN(view_as_real));
  m.impl("view_as_complex", TORCH_FN(view_as_complex));
  m.impl("is_set_to", TORCH_FN(is_set_to));
  m.impl("resize_", TORCH_FN(resize_));
  m.impl("_resize_output_", TORCH_FN(resize_output_));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(set_storage_offset_));
  m.impl("set_.source_Storage", TORCH_FN(set_storage_));
  m.impl("set_.source_Tensor", TORCH_FN(set_tensor_));
  m.impl("set_", TORCH_FN(set_empty_));
  m.impl("record_stream", TORCH_FN(record_stream));
  m.impl("_has_compatible_shallow_copy_type", TORCH_FN(has_compatible_shallow_copy_type));
}

}  // namespace torch_tpu
