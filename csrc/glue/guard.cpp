// guard.cpp — c10::impl::DeviceGuardImplInterface for tpu (device + stream + event
// plumbing), plus the runtime bootstrap the other files share.
//
// Streams: libtpurt has ONE in-order queue per device, so every stream of a device
// is that queue: the stream id is always 0 (getStream / getDefaultStream /
// getNewStream / exchangeStream all return it). Consequences:
//   - block(event, stream) is a no-op: work enqueued after it on the (single) queue
//     already runs after everything the event marks.
//   - recordDataPtrOnStream is a no-op: the caching allocator only reuses a freed
//     block for work enqueued after the free, which on an in-order queue is safe.
// Events: a heap `TpuEvent` behind the void* (created by the first record, freed
// by destroyEvent) holding the queue position from tpu_rt_event_record.
#include <atomic>
#include <chrono>
#include <thread>
#include <mutex>

#include <c10/core/Stream.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include "glue.h"

namespace torch_tpu {

// ---------------------------------------------------------------- runtime bootstrap

namespace {
std::atomic<bool> g_runtime_ok{false};
std::mutex g_init_mutex;
thread_local c10::DeviceIndex t_current_device = 0;
// The guard's setDevice ran: the autograd engine's device threads call it as they start (module.cpp's
// drain_autograd_threads is needed only then)
std::atomic<bool> g_guard_set_device{false};

// Returns NULL on success, else the (owned) failure status. Retries after failure
// (tpurt.h: an invalid environment leaves the runtime uninitialized).
tpu_status_t init_runtime() noexcept {
  if (g_runtime_ok.load(std::memory_order_acquire)) return TPU_OK;
  std::lock_guard<std::mutex> lock(g_init_mutex);
  if (g_runtime_ok.load(std::memory_order_relaxed)) return TPU_OK;
  tpu_status_t st = tpu_rt_init();
  if (st == TPU_OK) g_runtime_ok.store(true, std::memory_order_release);
  return st;
}
}  // namespace

bool runtime_ok() noexcept {
  tpu_status_t st = init_runtime();
  if (st == TPU_OK) return true;
  tpu_status_free(st);
  return false;
}

void runtime_init_or_throw() {
  if (C10_LIKELY(g_runtime_ok.load(std::memory_order_acquire))) return;
  tpu_status_t st = init_runtime();
  if (st != TPU_OK) throw_status(st, "torch_tpu: cannot initialize the tpu runtime");
}

c10::DeviceIndex device_count() noexcept {
  if (!runtime_ok()) return 0;
  return static_cast<c10::DeviceIndex>(tpu_rt_device_count());
}

c10::DeviceIndex current_device() noexcept { return t_current_device; }

bool guard_set_device_seen() noexcept { return g_guard_set_device.load(std::memory_order_relaxed); }

void check_device_index(int64_t index) {
  const c10::DeviceIndex n = device_count();
  TORCH_CHECK_INDEX(index >= 0 && index < n, "tpu: invalid device index ", index,
                    " (there ", n == 1 ? "is " : "are ", int(n), " tpu device", n == 1 ? "" : "s",
                    "; set TORCH_TPU_NUM_DEVICES for more)");
}

void set_current_device(c10::DeviceIndex index) {
  if (index == t_current_device) return;
  check_device_index(index);
  t_current_device = index;
}

// ---------------------------------------------------------------- guard

namespace {

struct TpuEvent {
  uint64_t position = 0;  // tpu_rt_event_record's queue position
  c10::DeviceIndex device = -1;
  bool recorded = false;
};

c10::DeviceIndex resolve(c10::DeviceIndex d) { return d < 0 ? current_device() : d; }

c10::Stream default_stream(c10::Device d) {
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(kTpu, resolve(d.index())), /*id=*/0);
}

struct TpuGuardImpl final : c10::impl::DeviceGuardImplInterface {
  TpuGuardImpl() = default;
  explicit TpuGuardImpl(c10::DeviceType t) {
    TORCH_INTERNAL_ASSERT(t == kTpu);
  }

  c10::DeviceType type() const override { return kTpu; }

  c10::Device exchangeDevice(c10::Device d) const override {
    TORCH_INTERNAL_ASSERT(d.type() == kTpu);
    const c10::DeviceIndex old = current_device();
    if (d.index() != old) set_current_device(d.index());
    return c10::Device(kTpu, old);
  }
  c10::Device getDevice() const override { return c10::Device(kTpu, current_device()); }
  void setDevice(c10::Device d) const override {
    TORCH_INTERNAL_ASSERT(d.type() == kTpu);
    g_guard_set_device.store(true, std::memory_order_relaxed);
    set_current_device(d.index());
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override { t_current_device = d.index(); }

  c10::Stream getStream(c10::Device d) const override { return default_stream(d); }
  c10::Stream getDefaultStream(c10::Device d) const override { return default_stream(d); }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool) const override { return default_stream(d); }
  c10::Stream getNewStream(c10::Device d, int) const override { return default_stream(d); }
  c10::Stream exchangeStream(c10::Stream s) const override { return default_stream(s.device()); }

  c10::DeviceIndex deviceCount() const noexcept override { return device_count(); }

  // ---- events
  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
              const c10::EventFlag) const override {
    TORCH_CHECK(device_index == -1 || device_index == resolve(stream.device_index()),
                "Event device index ", int(device_index), " does not match recording stream's device index ",
                int(resolve(stream.device_index())), ".");
    auto* ev = static_cast<TpuEvent*>(*event);
    if (ev == nullptr) {
      ev = new TpuEvent();
      *event = ev;
    }
    uint64_t position = 0;
    check_status(tpu_rt_event_record(resolve(stream.device_index()), &position));
    ev->position = position;
    ev->device = resolve(stream.device_index());
    ev->recorded = true;
  }
  void block(void* /*event*/, const c10::Stream& /*stream*/) const override {
    // One in-order queue per device: nothing to wait for (see the file comment).
    // Across devices, cross-device copies in libtpurt are synchronous.
  }
  bool queryEvent(void* event) const override {
    auto* ev = static_cast<TpuEvent*>(event);
    if (ev == nullptr || !ev->recorded) return true;
    bool done = false;
    check_status(tpu_rt_event_query(ev->device, ev->position, &done));
    return done;
  }
  void synchronizeEvent(void* event) const override {
    auto* ev = static_cast<TpuEvent*>(event);
    if (ev == nullptr || !ev->recorded) return;
    check_status(tpu_rt_event_synchronize(ev->device, ev->position));
  }
  double elapsedTime(void* start, void* end, const c10::DeviceIndex) const override {
    auto* a = static_cast<TpuEvent*>(start);
    auto* b = static_cast<TpuEvent*>(end);
    TORCH_CHECK(a != nullptr && b != nullptr && a->recorded && b->recorded,
                "Both events must be recorded before calculating elapsed time.");
    TORCH_CHECK(a->device == b->device, "Both events must be recorded on the same device.");
    // Like CUDA, only completed events have a time: wait for the later one.
    check_status(tpu_rt_event_synchronize(b->device, b->position));
    check_status(tpu_rt_event_synchronize(a->device, a->position));
    int64_t ns = 0;
    check_status(tpu_rt_event_elapsed_ns(a->device, a->position, b->position, &ns));
    return static_cast<double>(ns) / 1e6;
  }
  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override {
    delete static_cast<TpuEvent*>(event);
  }

  // ---- streams
  bool queryStream(const c10::Stream& stream) const override {
    // tpurt.h has no "is the queue idle" query: record a marker and give an idle queue
    // a moment (microseconds) to reach it. A busy queue answers false after ~200 us.
    const c10::DeviceIndex d = resolve(stream.device_index());
    uint64_t position = 0;
    check_status(tpu_rt_event_record(d, &position));
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(200);
    for (;;) {
      bool done = false;
      check_status(tpu_rt_event_query(d, position, &done));
      if (done) return true;
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::yield();
    }
  }
  void synchronizeStream(const c10::Stream& stream) const override {
    check_status(tpu_rt_synchronize(resolve(stream.device_index())));  // may raise a pending async error
  }
  void synchronizeDevice(const c10::DeviceIndex device_index) const override {
    check_status(tpu_rt_synchronize(resolve(device_index)));
  }
  void recordDataPtrOnStream(const c10::DataPtr&, const c10::Stream&) const override {}
};

}  // namespace

C10_REGISTER_GUARD_IMPL(PrivateUse1, TpuGuardImpl);

}  // namespace torch_tpu
