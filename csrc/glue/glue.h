// glue.h — what the glue's files share. Nothing here does math; see README.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <c10/core/Allocator.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <tpurt.h>

#include "status.h"

namespace torch_tpu {

constexpr c10::DeviceType kTpu = c10::DeviceType::PrivateUse1;

// ---- runtime (guard.cpp)
// Initializes libtpurt once; false (never throws) if it cannot start. Cheap after success.
bool runtime_ok() noexcept;
// Initializes libtpurt; throws the C error message on failure.
void runtime_init_or_throw();
// 0 if the runtime cannot start; never throws.
c10::DeviceIndex device_count() noexcept;
// The device guard's setDevice has run on some thread (the autograd engine's device threads call it as they start).
bool guard_set_device_seen() noexcept;
// The calling thread's current device (default 0).
c10::DeviceIndex current_device() noexcept;
// Validates `index` (throws if out of range) and makes it current.
void set_current_device(c10::DeviceIndex index);
// A device index in [0, device_count) or throws (IndexError-like RuntimeError).
void check_device_index(int64_t index);

// ---- allocator (allocator.cpp)
c10::Allocator* tpu_allocator();

// ---- generator (generator.cpp)
const at::Generator& default_generator(c10::DeviceIndex index);  // -1: current device
at::Generator new_generator(c10::DeviceIndex index);              // -1: current device
// The runtime generator behind a tpu at::Generator (throws for other devices).
tpu_rt_generator_t* runtime_generator(const at::Generator& gen);

// ---- dtypes (fallback.cpp)
// at::ScalarType -> tpu_dtype_t; nullopt for dtypes the runtime lacks.
std::optional<tpu_dtype_t> to_tpu_dtype(c10::ScalarType t) noexcept;
// Same, but throws NotImplementedError "tpu does not support dtype X (in <op>)".
tpu_dtype_t to_tpu_dtype_or_throw(c10::ScalarType t, const char* op_name);
// Fills a record for a tpu tensor (device memory, storage offset applied).
void fill_tensor_record(const at::Tensor& t, tpu_tensor_t* out, const char* op_name);
// Compile path (torch_tpu/_compile.py _NodeWalk): the layouts of op `name`'s results (one list per return: a Tensor
// return's one tensor, a Tensor[]'s tensors; only sizes, strides and dtype are read) for this thread's next meta
// cache miss, which uses them instead of running the op's meta function when that miss is this op's (any other
// op's miss drops the hint). The caller vouches that they are what the meta function gives for the call's
// argument layouts (FX meta["val"] of a graph traced with them). An empty name drops a pending hint.
void set_meta_hint(const std::string& name, const std::vector<std::vector<at::Tensor>>& rets);
uint64_t meta_hints_used() noexcept;  // hints used in place of a meta function, since start

// ---- storage (tensor_factory.cpp)
// Grows `self`'s storage (device-side copy of the old bytes) so that `self` can
// hold `sizes`/`strides` (contiguous strides if `strides` is empty), then sets them.
void resize_tpu_tensor(const at::Tensor& self, c10::IntArrayRef sizes, c10::IntArrayRef strides = {});
// Replaces a storage's buffer with one of `new_nbytes`, copying min(old, new) bytes
// on the device. Used by resize_ and the hooks' resizePrivateUse1Bytes.
void resize_storage_bytes(c10::StorageImpl* storage, size_t new_nbytes);

// ---- CPU fallback (fallback.cpp)
void set_cpu_fallback(bool enabled);
bool cpu_fallback_enabled();
std::vector<std::pair<std::string, uint64_t>> fallback_counts();  // op name -> CPU-fallback runs
uint64_t fallback_total();
void fallback_reset();

}  // namespace torch_tpu
