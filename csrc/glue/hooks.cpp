// hooks.cpp — at::PrivateUse1HooksInterface for tpu. PyTorch reaches these through
// at::globalContext() (autograd's device threads, torch.Generator("tpu"),
// UntypedStorage.resize_, at::from_blob device inference, pinned-memory queries).
// isAvailable/isBuilt/deviceCount never throw.
#include <ATen/Context.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/StorageImpl.h>

#include "glue.h"

namespace torch_tpu {
namespace {

struct TpuHooks final : at::PrivateUse1HooksInterface {
  void init() const override { runtime_init_or_throw(); }
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return device_count() > 0; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  c10::DeviceIndex deviceCount() const override { return device_count(); }

  void setCurrentDevice(c10::DeviceIndex device) const override { set_current_device(device); }
  c10::DeviceIndex getCurrentDevice() const override { return current_device(); }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override {
    const c10::DeviceIndex old = current_device();
    set_current_device(device);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override {
    const c10::DeviceIndex old = current_device();
    if (device >= 0 && device < device_count()) set_current_device(device);
    return old;
  }

  const at::Generator& getDefaultGenerator(c10::DeviceIndex device_index) const override {
    return default_generator(device_index);
  }
  at::Generator getNewGenerator(c10::DeviceIndex device_index) const override {
    return new_generator(device_index);
  }

  // libtpurt has no pointer -> device query; with one device (the default) this is
  // exact, otherwise the current device is the best guess.
  c10::Device getDeviceFromPtr(void*) const override { return c10::Device(kTpu, current_device()); }

  // There is no tpu pinned memory: host buffers are always staged by the runtime.
  c10::Allocator* getPinnedMemoryAllocator() const override { return c10::GetCPUAllocator(); }
  bool isPinnedPtr(const void*) const override { return false; }

  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    resize_storage_bytes(storage.unsafeGetStorageImpl(), newsize);
  }
};

struct Registerer {
  Registerer() { at::RegisterPrivateUse1HooksInterface(new TpuHooks()); }
};
Registerer g_registerer;

}  // namespace
}  // namespace torch_tpu
