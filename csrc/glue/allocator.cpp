// allocator.cpp — c10::Allocator for tpu memory: a thin shim over tpu_rt_malloc /
// tpu_rt_free (the caching lives in libtpurt's allocator, one per device).
//
// The DataPtr's deleter must know the device, but a DataPtr deleter only receives
// its context pointer. Rather than heap-allocating a context per allocation (this is
// the per-op hot path), there is one deleter function per device index, generated
// below; the context is the device address itself.
#include <array>
#include <string>
#include <utility>

#include <c10/core/Allocator.h>
#include <c10/util/Exception.h>

#include "glue.h"

namespace torch_tpu {
namespace {

constexpr int kMaxDevices = 64;  // TORCH_TPU_NUM_DEVICES is 1..64 (tpurt.h)

template <int D>
void free_on_device(void* ptr) {
  tpu_rt_free(D, ptr);  // never fails; NULL and unknown pointers are ignored
}

template <int... Ds>
constexpr std::array<c10::DeleterFnPtr, sizeof...(Ds)> make_deleters(std::integer_sequence<int, Ds...>) {
  return {{&free_on_device<Ds>...}};
}
constexpr auto kDeleters = make_deleters(std::make_integer_sequence<int, kMaxDevices>{});

struct TpuAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    const c10::DeviceIndex device = current_device();
    TORCH_CHECK(device >= 0 && device < kMaxDevices, "tpu: invalid current device ", int(device));
    runtime_init_or_throw();
    void* ptr = nullptr;
    tpu_status_t st = tpu_rt_malloc(device, nbytes, &ptr);
    if (C10_UNLIKELY(st != TPU_OK)) throw_status(st);
    return {ptr, ptr, kDeleters[device], c10::Device(kTpu, device)};
  }

  // Storage-level copies (e.g. Storage.clone()): both buffers are device memory.
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    if (count == 0) return;
    const c10::DeviceIndex device = current_device();
    check_status(tpu_rt_memcpy_d2d(device, dest, device, src, count));
  }
};

TpuAllocator g_allocator;

}  // namespace

c10::Allocator* tpu_allocator() { return &g_allocator; }

REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_allocator);

}  // namespace torch_tpu
