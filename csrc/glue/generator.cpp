// generator.cpp — c10::GeneratorImpl for tpu: a handle on a libtpurt Philox
// generator. Default generators (one per device) borrow tpu_rt_default_generator(i);
// torch.Generator("tpu") creates and owns a new one.
//
// State (get_state/set_state): a CPU uint8 tensor of 16 bytes: seed (u64) then
// offset (u64), host byte order.
#include <array>
#include <cstring>
#include <mutex>

#include <ATen/EmptyTensor.h>
#include <ATen/core/Generator.h>
#include <c10/core/GeneratorImpl.h>
#include <c10/core/TensorImpl.h>
#include <c10/util/Exception.h>

#include "glue.h"

namespace torch_tpu {
namespace {

constexpr int kMaxDevices = 64;
constexpr size_t kStateBytes = 16;

class TpuGeneratorImpl final : public c10::GeneratorImpl {
 public:
  TpuGeneratorImpl(c10::DeviceIndex device, tpu_rt_generator_t* gen, bool owned)
      : c10::GeneratorImpl(c10::Device(kTpu, device), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
        gen_(gen),
        owned_(owned) {}
  ~TpuGeneratorImpl() override {
    if (owned_) tpu_rt_generator_destroy(gen_);
  }

  static c10::DeviceType device_type() { return kTpu; }
  tpu_rt_generator_t* runtime() const { return gen_; }

  void set_current_seed(uint64_t seed) override { tpu_rt_generator_set_seed(gen_, seed); }
  uint64_t current_seed() const override { return tpu_rt_generator_seed(gen_); }
  uint64_t seed() override {
    const uint64_t s = c10::detail::getNonDeterministicRandom(/*is_cuda=*/false);
    set_current_seed(s);
    return s;
  }
  void set_offset(uint64_t offset) override { tpu_rt_generator_set_offset(gen_, offset); }
  uint64_t get_offset() const override { return tpu_rt_generator_offset(gen_); }

  void set_state(const c10::TensorImpl& state) override {
    TORCH_CHECK_TYPE(state.device().is_cpu() && state.dtype() == at::kByte,
                     "RNG state must be a torch.ByteTensor on the CPU");
    TORCH_CHECK(state.numel() == static_cast<int64_t>(kStateBytes) && state.is_contiguous(),
                "tpu RNG state must be a contiguous ByteTensor of ", kStateBytes, " bytes (seed u64, offset u64), got ",
                state.numel());
    uint64_t words[2];
    std::memcpy(words, state.data(), kStateBytes);
    tpu_rt_generator_set_seed(gen_, words[0]);
    tpu_rt_generator_set_offset(gen_, words[1]);
  }
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override {
    at::TensorBase t = at::detail::empty_cpu({static_cast<int64_t>(kStateBytes)}, at::kByte);
    const uint64_t words[2] = {tpu_rt_generator_seed(gen_), tpu_rt_generator_offset(gen_)};
    std::memcpy(t.mutable_data_ptr(), words, kStateBytes);
    return t.getIntrusivePtr();
  }

 private:
  TpuGeneratorImpl* clone_impl() const override {
    tpu_rt_generator_t* gen = nullptr;
    check_status(tpu_rt_generator_create(device().index(), tpu_rt_generator_seed(gen_), &gen));
    tpu_rt_generator_set_offset(gen, tpu_rt_generator_offset(gen_));
    return new TpuGeneratorImpl(device().index(), gen, /*owned=*/true);
  }

  tpu_rt_generator_t* gen_;
  bool owned_;
};

std::array<at::Generator, kMaxDevices> g_default_generators;
std::array<std::once_flag, kMaxDevices> g_default_once;

c10::DeviceIndex resolve_index(c10::DeviceIndex index) {
  const c10::DeviceIndex d = index < 0 ? current_device() : index;
  check_device_index(d);
  return d;
}

}  // namespace

const at::Generator& default_generator(c10::DeviceIndex index) {
  runtime_init_or_throw();
  const c10::DeviceIndex d = resolve_index(index);
  std::call_once(g_default_once[d], [d] {
    tpu_rt_generator_t* gen = tpu_rt_default_generator(d);
    TORCH_CHECK(gen != nullptr, "tpu: no default generator for device ", int(d));
    g_default_generators[d] = at::make_generator<TpuGeneratorImpl>(d, gen, /*owned=*/false);
  });
  return g_default_generators[d];
}

at::Generator new_generator(c10::DeviceIndex index) {
  runtime_init_or_throw();
  const c10::DeviceIndex d = resolve_index(index);
  tpu_rt_generator_t* gen = nullptr;
  check_status(tpu_rt_generator_create(d, c10::default_rng_seed_val, &gen));
  return at::make_generator<TpuGeneratorImpl>(d, gen, /*owned=*/true);
}

tpu_rt_generator_t* runtime_generator(const at::Generator& gen) {
  TORCH_CHECK(gen.device().type() == kTpu, "Expected a 'tpu' device type for generator but found '",
              gen.device().type(), "'");
  return static_cast<TpuGeneratorImpl*>(gen.unsafeGetGeneratorImpl())->runtime();
}

}  // namespace torch_tpu
