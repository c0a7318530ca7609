// allocator.cpp — c10::Allocator for tpu memory: a thin shim over tpu_rt_malloc /
// tpu_rt_free (the caching lives in libtpurt's allocator, one per device). It is a
// c10::CachingDeviceAllocator::DeviceAllocator so that torch.accelerator's memory
// functions (memory_allocated, memory_stats, empty_cache, ...) work for tpu.
//
// The DataPtr's deleter must know the device, but a DataPtr deleter only receives
// its context pointer. Rather than heap-allocating a context per allocation (this is
// the per-op hot path), there is one deleter function per device index, generated
// below; the context is the device address itself.
#include <algorithm>
#include <array>
#include <string>
#include <utility>

#include <c10/core/Allocator.h>
#include <c10/core/CachingDeviceAllocator.h>
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

namespace cda = c10::CachingDeviceAllocator;

void set_stat(c10::CachingAllocator::StatArray& a, int64_t current, int64_t peak, int64_t allocated,
              int64_t freed) {
  auto& s = a[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)];
  s.current = current;
  s.peak = peak;
  s.allocated = allocated;
  s.freed = freed;
}

struct TpuAllocator final : c10::DeviceAllocator {
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

  // ---- DeviceAllocator (torch.accelerator memory API)
  bool initialized() override { return runtime_ok(); }

  void emptyCache(c10::MempoolId_t /*mempool_id*/) override {
    const c10::DeviceIndex n = device_count();
    for (c10::DeviceIndex d = 0; d < n; ++d) check_status(tpu_rt_empty_cache(d));
  }

  // One in-order queue per device: a freed block is only reused by later work.
  void recordStream(const c10::DataPtr&, c10::Stream) override {}

  cda::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    check_device_index(device);
    tpu_rt_memory_stats_t m{};
    check_status(tpu_rt_memory_stats(device, &m));
    cda::DeviceStats s;
    const auto i = [](uint64_t v) { return static_cast<int64_t>(v); };
    // Byte counters since the last reset; libtpurt keeps no cumulative byte totals.
    set_stat(s.allocated_bytes, i(m.allocated_bytes), i(m.max_allocated_bytes), 0, 0);
    set_stat(s.active_bytes, i(m.allocated_bytes), i(m.max_allocated_bytes), 0, 0);
    set_stat(s.reserved_bytes, i(m.reserved_bytes), i(m.max_reserved_bytes), 0, 0);
    set_stat(s.requested_bytes, i(m.requested_bytes), i(m.requested_bytes), 0, 0);
    const int64_t live = i(m.num_allocs) - i(m.num_frees);
    set_stat(s.allocation, live, live, i(m.num_allocs), i(m.num_frees));
    set_stat(s.active, live, live, i(m.num_allocs), i(m.num_frees));
    s.num_ooms = i(m.num_ooms);
    return s;
  }

  void resetAccumulatedStats(c10::DeviceIndex) override {
    TORCH_CHECK_NOT_IMPLEMENTED(false, "tpu: resetting accumulated memory statistics is not supported "
                                       "(libtpurt only resets peaks: use reset_peak_memory_stats)");
  }

  void resetPeakStats(c10::DeviceIndex device) override {
    check_device_index(device);
    check_status(tpu_rt_reset_peak_memory_stats(device));
  }

  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    check_device_index(device);
    tpu_rt_memory_stats_t m{};
    check_status(tpu_rt_memory_stats(device, &m));
    const uint64_t used = std::min(m.reserved_bytes, m.capacity_bytes);
    return {static_cast<size_t>(m.capacity_bytes - used), static_cast<size_t>(m.capacity_bytes)};
  }
};

TpuAllocator g_allocator;

}  // namespace

c10::Allocator* tpu_allocator() { return &g_allocator; }

REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_allocator);

}  // namespace torch_tpu
