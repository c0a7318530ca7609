// fallback.cpp — the ONE boxed kernel every tpu op without a metadata-only kernel
// reaches (TORCH_LIBRARY_IMPL(_, PrivateUse1)). It marshals the boxed stack into
// tpu_arg_t records and calls tpu_op_run; it has no per-op code.
//
//   1. Per operator (cached by schema address): its name "aten::add.out", whether
//      libtpurt has a lowering, and a tag per argument/return from the schema.
//   2. Not supported: the opt-in CPU fallback (TORCH_TPU_CPU_FALLBACK=1 or
//      torch_tpu._C._set_cpu_fallback(True)), counted and warned once per op; else
//      NotImplementedError naming the op and the env var.
//   3. Device: the first tpu tensor argument, else a Device argument, else the
//      current device. Every tensor must be on it, except CPU 0-dim tensors (passed
//      as SCALAR records, like PyTorch's CPU scalars).
//   4. Outputs ("outs" of tpu_op_run, in this order):
//        a. every tensor of every written argument (`Tensor(a!)`: in-place self,
//           out=, mutable lists), in schema order; an out= tensor whose shape
//           differs from what the meta function computes (e.g. numel()==0) is
//           resized first, like ATen's resize_output;
//        b. then, per schema return that aliases no argument, a fresh tpu tensor:
//           Tensor / Tensor[] returns get PyTorch's meta function's sizes, strides
//           and dtypes (the op re-run on meta tensors; if that fails, e.g. for
//           data-dependent shapes, the op's C shape rule); bool / int / float returns get a
//           0-dim tpu tensor of dtype bool / int64 / float64 that the lowering
//           writes and the glue reads back (tpu_op_run has no scalar results).
//   5. tpu_op_run; UNSUPPORTED (a lowering rejecting a dtype/argument combination)
//      goes to the CPU fallback if enabled, else NotImplementedError.
//   6. Results: aliased returns push the argument back, fresh ones the new tensors.
//
// The hot path avoids heap traffic: records live in a stack arena (Arena), the op
// name is cached, and the meta re-dispatch only happens for functional ops that are not
// structured (structured ones are registered by name and reuse the layout PyTorch's
// CompositeExplicitAutogradNonFunctional kernel gave the first call with the same
// argument signature: see via_out_ops and the last TORCH_LIBRARY_IMPL).
#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <ATen/Context.h>
#include <ATen/EmptyTensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <ATen/native/CPUFallback.h>
#include <c10/core/DefaultDtype.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/SmallVector.h>
#include <c10/util/strides.h>
#include <torch/library.h>

#include "glue.h"

namespace torch_tpu {

// ---------------------------------------------------------------- dtypes

std::optional<tpu_dtype_t> to_tpu_dtype(c10::ScalarType t) noexcept {
  switch (t) {
    case c10::ScalarType::Float: return TPU_DTYPE_F32;
    case c10::ScalarType::Double: return TPU_DTYPE_F64;
    case c10::ScalarType::Half: return TPU_DTYPE_F16;
    case c10::ScalarType::BFloat16: return TPU_DTYPE_BF16;
    case c10::ScalarType::Long: return TPU_DTYPE_I64;
    case c10::ScalarType::Int: return TPU_DTYPE_I32;
    case c10::ScalarType::Short: return TPU_DTYPE_I16;
    case c10::ScalarType::Char: return TPU_DTYPE_I8;
    case c10::ScalarType::Byte: return TPU_DTYPE_U8;
    case c10::ScalarType::Bool: return TPU_DTYPE_BOOL;
    default: return std::nullopt;
  }
}

tpu_dtype_t to_tpu_dtype_or_throw(c10::ScalarType t, const char* op_name) {
  if (auto d = to_tpu_dtype(t)) return *d;
  C10_THROW_ERROR(NotImplementedError, std::string("tpu does not support dtype ") +
                                           std::string(c10::getDtypeNames(t).first) + " (in " + op_name + ")");
}

void fill_tensor_record(const at::Tensor& t, tpu_tensor_t* out, const char* op_name) {
  const int64_t ndim = t.dim();
  if (C10_UNLIKELY(ndim > TPU_MAX_DIMS)) {
    C10_THROW_ERROR(NotImplementedError, "tpu supports tensors of at most " + std::to_string(TPU_MAX_DIMS) +
                                             " dimensions, got " + std::to_string(ndim) + " (in " + op_name + ")");
  }
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  out->data = impl->numel() == 0 ? nullptr : t.data_ptr();
  out->device = t.device().index();
  const c10::ScalarType st = impl->dtype().toScalarType();
  const std::optional<tpu_dtype_t> dt = C10_LIKELY(st == c10::ScalarType::Float) ? TPU_DTYPE_F32 : to_tpu_dtype(st);
  out->dtype = dt ? *dt : to_tpu_dtype_or_throw(st, op_name);
  out->ndim = static_cast<int32_t>(ndim);
  out->flags = 0;
  // sizes and strides past ndim are zero (whole-array copies and memcmp-style checks of records
  // stay deterministic): zero both arrays first, then copy the used dims
  std::memset(out->sizes, 0, sizeof(out->sizes));
  std::memset(out->strides, 0, sizeof(out->strides));
  const int64_t* sizes = impl->sizes().data();
  const int64_t* strides = impl->strides().data();
  for (int64_t d = 0; d < ndim; ++d) {
    out->sizes[d] = sizes[d];
    out->strides[d] = strides[d];
  }
}

namespace {

void fill_absent_record(tpu_tensor_t* out) {
  std::memset(out, 0, sizeof(*out));
  out->ndim = -1;
}

// ---------------------------------------------------------------- CPU fallback state

std::atomic<int> g_fallback_flag{-1};  // -1: read TORCH_TPU_CPU_FALLBACK on first use
std::atomic<uint64_t> g_fallback_total{0};
std::mutex g_fallback_mutex;
std::unordered_map<std::string, uint64_t> g_fallback_counts;
std::unordered_set<std::string> g_fallback_warned;

}  // namespace

// torch.set_float32_matmul_precision reaches the C core as its precision source: libtpurt asks
// only for ops whose graphs have a DOT or a convolution (a sticky per-lowering flag), since
// at::Context resolves the setting through its fp32-precision table (~570 instructions by
// callgrind, more than the rest of a tiny op's glue). Registered when the extension loads. Same
// numbering: HIGHEST 0, HIGH 1, MEDIUM 2 (tpu_matmul_precision_t).
static int matmul_precision_source() noexcept {
  try {
    return static_cast<int>(at::globalContext().float32MatmulPrecision());
  } catch (...) {
    return 0;  // a conflicting TF32 configuration: keep f32 products
  }
}
static const bool g_matmul_precision_source_set = [] {
  tpu_rt_set_matmul_precision_source(&matmul_precision_source);
  return true;
}();

void set_cpu_fallback(bool enabled) { g_fallback_flag.store(enabled ? 1 : 0); }

bool cpu_fallback_enabled() {
  int v = g_fallback_flag.load(std::memory_order_relaxed);
  if (C10_UNLIKELY(v < 0)) {
    const char* env = std::getenv("TORCH_TPU_CPU_FALLBACK");
    const int wanted = (env != nullptr && env[0] != '\0' && std::strcmp(env, "0") != 0) ? 1 : 0;
    int expected = -1;
    g_fallback_flag.compare_exchange_strong(expected, wanted);
    v = g_fallback_flag.load();
  }
  return v == 1;
}

std::vector<std::pair<std::string, uint64_t>> fallback_counts() {
  std::lock_guard<std::mutex> lock(g_fallback_mutex);
  return {g_fallback_counts.begin(), g_fallback_counts.end()};
}

uint64_t fallback_total() { return g_fallback_total.load(); }

void fallback_reset() {
  std::lock_guard<std::mutex> lock(g_fallback_mutex);
  g_fallback_counts.clear();
  g_fallback_total.store(0);
}

namespace {

// ---------------------------------------------------------------- per-op schema info

enum ArgTag : uint8_t {
  A_TENSOR,        // Tensor, Tensor?
  A_TENSOR_LIST,   // Tensor[], Tensor?[]
  A_SCALAR,        // Scalar, Scalar?
  A_SCALAR_LIST,   // Scalar[]
  A_INT,           // int, SymInt (and optionals)
  A_DOUBLE,        // float
  A_BOOL,          // bool
  A_INT_LIST,      // int[], SymInt[]
  A_DOUBLE_LIST,   // float[]
  A_BOOL_LIST,     // bool[]
  A_STRING,        // str
  A_GENERATOR,     // Generator?
  A_DTYPE,         // ScalarType
  A_LAYOUT,        // Layout, MemoryFormat (passed through as ints)
  A_DEVICE,        // Device
  A_OTHER,         // Dimname, Stream, Storage, ...: only None is accepted
};

enum RetTag : uint8_t {
  R_ALIAS,        // aliases written argument `arg` (in-place self, out=): push it back
  R_TENSOR,       // fresh Tensor / Tensor?
  R_TENSOR_LIST,  // fresh Tensor[]
  R_BOOL,         // fresh bool (read back from a 0-dim tpu tensor)
  R_INT,          // fresh int / SymInt
  R_DOUBLE,       // fresh float
  R_VIEW,         // aliases an input without writing: a view op (must be registered, never copied)
  R_OTHER,
};

struct ArgInfo {
  ArgTag tag;
  bool write;  // Tensor(a!) / Tensor(a!)[]
  bool out;    // kwarg-only written argument (out=)
};

struct RetInfo {
  RetTag tag;
  int arg;  // R_ALIAS: the argument index
};

struct MetaShapes;
constexpr size_t kMetaCacheMaxEntries = 4096;  // per op; the cache is cleared when full

struct MetaCache {
  std::mutex mu;
  std::unordered_map<uint64_t, std::vector<std::pair<std::vector<int64_t>, std::shared_ptr<const MetaShapes>>>> map;
  size_t entries = 0;
};

struct OpInfo {
  std::string name;  // "aten::add.out"
  size_t nargs = 0, nrets = 0;
  bool supported = false;
  const tpu_op_t* op = nullptr;   // libtpurt's handle (tpu_op_find): no by-name lookup per call
  bool has_out = false;           // any out= argument (may need resizing)
  bool needs_meta = false;        // a fresh Tensor / Tensor[] return
  bool has_view = false;          // an R_VIEW return
  bool has_tensor_list = false;   // a Tensor[] / Tensor?[] argument (may hold CPU indices)
  bool foreach = false;           // aten::_foreach_*: a CPU 1-D `Tensor scalars` is a Scalar[]
  bool scalar_rets = false;       // a bool / int / float return (a 0-dim result tensor)
  bool bad_ret = false;           // an R_OTHER return
  bool via_out = false;           // a functional op run through its .out overload's lowering (via_out_ops)
  bool shape_rule = false;        // libtpurt has a pure C shape rule (tpu_op_shapes_kind) usable in place of meta
  const c10::SafeKernelFunction* composite = nullptr;  // via_out: PyTorch's kernel for a new signature
  std::vector<ArgInfo> args;
  std::vector<RetInfo> rets;
  std::unique_ptr<MetaCache> meta_cache = std::make_unique<MetaCache>();
};

ArgTag classify_arg(const c10::TypePtr& real_type) {
  c10::TypePtr t = real_type;
  if (auto opt = t->cast<c10::OptionalType>()) t = opt->getElementType();
  switch (t->kind()) {
    case c10::TypeKind::TensorType: return A_TENSOR;
    case c10::TypeKind::NumberType: return A_SCALAR;
    case c10::TypeKind::IntType:
    case c10::TypeKind::SymIntType: return A_INT;
    case c10::TypeKind::FloatType:
    case c10::TypeKind::SymFloatType: return A_DOUBLE;
    case c10::TypeKind::BoolType:
    case c10::TypeKind::SymBoolType: return A_BOOL;
    case c10::TypeKind::StringType: return A_STRING;
    case c10::TypeKind::GeneratorType: return A_GENERATOR;
    case c10::TypeKind::ScalarTypeType: return A_DTYPE;
    case c10::TypeKind::LayoutType:
    case c10::TypeKind::MemoryFormatType: return A_LAYOUT;
    case c10::TypeKind::DeviceObjType: return A_DEVICE;
    case c10::TypeKind::ListType: {
      c10::TypePtr e = t->castRaw<c10::ListType>()->getElementType();
      if (auto opt = e->cast<c10::OptionalType>()) e = opt->getElementType();
      switch (e->kind()) {
        case c10::TypeKind::TensorType: return A_TENSOR_LIST;
        case c10::TypeKind::IntType:
        case c10::TypeKind::SymIntType: return A_INT_LIST;
        case c10::TypeKind::FloatType: return A_DOUBLE_LIST;
        case c10::TypeKind::BoolType: return A_BOOL_LIST;
        case c10::TypeKind::NumberType: return A_SCALAR_LIST;
        default: return A_OTHER;
      }
    }
    default: return A_OTHER;
  }
}

RetTag classify_ret(const c10::TypePtr& real_type) {
  c10::TypePtr t = real_type;
  if (auto opt = t->cast<c10::OptionalType>()) t = opt->getElementType();
  switch (t->kind()) {
    case c10::TypeKind::TensorType: return R_TENSOR;
    case c10::TypeKind::BoolType: return R_BOOL;
    case c10::TypeKind::IntType:
    case c10::TypeKind::SymIntType: return R_INT;
    case c10::TypeKind::FloatType: return R_DOUBLE;
    case c10::TypeKind::ListType: {
      c10::TypePtr e = t->castRaw<c10::ListType>()->getElementType();
      return e->kind() == c10::TypeKind::TensorType ? R_TENSOR_LIST : R_OTHER;
    }
    default: return R_OTHER;
  }
}

// Functional ops registered by name below (TORCH_LIBRARY_IMPL at the end) -> their .out
// overload ("aten::add.Tensor" -> "aten::add.out") and the PrivateUse1 kernel they had
// before (PyTorch's CompositeExplicitAutogradNonFunctional one). Filled during static
// registration, read-only afterwards.
struct ViaOut {
  std::string out_name;
  c10::SafeKernelFunction composite;
};
std::unordered_map<std::string, ViaOut>& via_out_ops() {
  static std::unordered_map<std::string, ViaOut> ops;
  return ops;
}

std::unique_ptr<OpInfo> build_op_info(const c10::FunctionSchema& schema) {
  auto info = std::make_unique<OpInfo>();
  info->name = schema.name();
  if (!schema.overload_name().empty()) info->name += "." + schema.overload_name();
  info->op = tpu_op_find(info->name.c_str());
  if (info->op == nullptr) {
    auto it = via_out_ops().find(info->name);
    if (it != via_out_ops().end()) {
      info->op = tpu_op_find(it->second.out_name.c_str());
      info->via_out = info->op != nullptr;
      info->composite = &it->second.composite;
    }
  }
  info->supported = info->op != nullptr;
  info->foreach = info->name.rfind("aten::_foreach_", 0) == 0;
  const auto& args = schema.arguments();
  const auto& rets = schema.returns();
  info->nargs = args.size();
  info->nrets = rets.size();
  for (const auto& a : args) {
    const bool write = a.alias_info() != nullptr && a.alias_info()->isWrite();
    info->args.push_back({classify_arg(a.real_type()), write, a.is_out()});
    info->has_out |= a.is_out();
    info->has_tensor_list |= info->args.back().tag == A_TENSOR_LIST;
  }
  for (const auto& r : rets) {
    RetInfo ri{classify_ret(r.real_type()), -1};
    if (const c10::AliasInfo* ra = r.alias_info()) {
      ri.tag = R_VIEW;
      if (ra->isWrite()) {
        for (size_t i = 0; i < args.size(); ++i) {
          const c10::AliasInfo* aa = args[i].alias_info();
          if (aa != nullptr && aa->isWrite() && aa->beforeSets() == ra->beforeSets()) {
            ri = {R_ALIAS, static_cast<int>(i)};
            break;
          }
        }
      }
    }
    info->needs_meta |= ri.tag == R_TENSOR || ri.tag == R_TENSOR_LIST;
    info->has_view |= ri.tag == R_VIEW;
    info->scalar_rets |= ri.tag == R_BOOL || ri.tag == R_INT || ri.tag == R_DOUBLE;
    info->bad_ret |= ri.tag == R_OTHER;
    info->rets.push_back(ri);
  }
  bool all_tensor_rets = true;
  for (const RetInfo& r : info->rets) all_tensor_rets &= r.tag == R_TENSOR;
  info->shape_rule = info->op != nullptr && !info->via_out && !info->has_out && info->nrets > 0 && all_tensor_rets &&
                     tpu_op_shapes_kind(info->op) == TPU_OP_SHAPES_PURE;
  return info;
}

std::mutex g_ops_mutex;
std::unordered_map<const c10::FunctionSchema*, std::unique_ptr<OpInfo>> g_ops;

// Per-thread direct-mapped cache in front of g_ops (a hash-map probe per op costs more).
struct OpCacheSlot {
  const c10::FunctionSchema* key = nullptr;
  const OpInfo* info = nullptr;
};
constexpr size_t kOpCacheSlots = 256;

const OpInfo& op_info(const c10::OperatorHandle& op) {
  const c10::FunctionSchema* key = &op.schema();
  thread_local OpCacheSlot t_cache[kOpCacheSlots];
  OpCacheSlot& cached = t_cache[(reinterpret_cast<uintptr_t>(key) >> 4) % kOpCacheSlots];
  if (C10_LIKELY(cached.key == key && cached.info->nargs == key->arguments().size() &&
                 cached.info->nrets == key->returns().size() &&
                 cached.info->name.size() == key->name().size() + (key->overload_name().empty()
                                                                       ? 0
                                                                       : key->overload_name().size() + 1))) {
    return *cached.info;
  }
  std::lock_guard<std::mutex> lock(g_ops_mutex);
  auto& slot = g_ops[key];
  // A schema address can be reused after a library is unregistered: rebuild on mismatch.
  if (!slot || slot->nargs != key->arguments().size() || slot->nrets != key->returns().size() ||
      slot->name.compare(0, key->name().size(), key->name()) != 0) {
    // Other threads may still hold the old entry in their caches: keep it alive.
    static std::vector<std::unique_ptr<OpInfo>> retired;
    if (slot) retired.push_back(std::move(slot));
    slot = build_op_info(*key);
  }
  cached = {key, slot.get()};
  return *slot;
}

// ---------------------------------------------------------------- errors

std::string device_str(c10::Device d) { return d.str(); }

[[noreturn]] void throw_device_mismatch(c10::Device a, c10::Device b) {
  C10_THROW_ERROR(Error, "Expected all tensors to be on the same device, but found at least two devices, " +
                             device_str(a) + " and " + device_str(b) + "!");
}

[[noreturn]] void throw_not_implemented(const OpInfo& info) {
  C10_THROW_ERROR(NotImplementedError,
                  "The operator '" + info.name + "' is not currently implemented for the " +
                      c10::get_privateuse1_backend() +
                      " device (torch_tpu). As a temporary, slow fix, set TORCH_TPU_CPU_FALLBACK=1 to run it on "
                      "the CPU.");
}

void run_cpu_fallback(const c10::OperatorHandle& op, const OpInfo& info, torch::jit::Stack* stack) {
  bool first = false;
  {
    std::lock_guard<std::mutex> lock(g_fallback_mutex);
    ++g_fallback_counts[info.name];
    first = g_fallback_warned.insert(info.name).second;
  }
  g_fallback_total.fetch_add(1, std::memory_order_relaxed);
  if (first) {
    TORCH_WARN("The operator '", info.name, "' is not natively supported on ", c10::get_privateuse1_backend(),
               "; running it on the CPU (slow). Counted in torch_tpu.metrics()['fallback_ops'].");
  }
  at::native::cpu_fallback(op, stack);
}

// ---------------------------------------------------------------- arena

// Bump allocator for the marshalling records: inline storage on the C++ stack,
// heap chunks only for very large calls. Pointers stay valid until destruction.
class Arena {
 public:
  template <class T>
  T* alloc(size_t n) {
    const size_t bytes = n * sizeof(T);
    const size_t off = (used_ + alignof(T) - 1) & ~(alignof(T) - 1);
    if (off + bytes <= sizeof(inline_)) {
      used_ = off + bytes;
      return reinterpret_cast<T*>(inline_ + off);
    }
    overflow_.emplace_back(new unsigned char[bytes == 0 ? 1 : bytes]);
    return reinterpret_cast<T*>(overflow_.back().get());
  }
  void reset() {
    used_ = 0;
    overflow_.clear();
  }

 private:
  alignas(16) unsigned char inline_[8192];
  size_t used_ = 0;
  std::vector<std::unique_ptr<unsigned char[]>> overflow_;
};

// ---------------------------------------------------------------- device pass

bool is_tpu(const at::Tensor& t) { return t.device().type() == kTpu; }

bool is_cpu_scalar(const at::Tensor& t) { return t.device().is_cpu() && t.dim() == 0; }

struct DeviceCheck {
  c10::DeviceIndex device = -1;
  std::optional<c10::Device> stray;  // a tensor that cannot join a tpu op

  void see(const at::Tensor& t, bool allow_cpu_scalar) {
    if (!t.defined()) return;
    if (C10_LIKELY(is_tpu(t))) {
      const c10::DeviceIndex d = t.device().index();
      if (device < 0) device = d;
      else if (d != device && !stray) stray = t.device();
    } else if (!(allow_cpu_scalar && is_cpu_scalar(t)) && !stray) {
      stray = t.device();
    }
  }
};

// Picks the op's device and checks every tensor is on it (or a CPU 0-dim tensor).
c10::DeviceIndex pick_device(const OpInfo& info, c10::ArrayRef<c10::IValue> args) {
  DeviceCheck dc;
  c10::DeviceIndex device_arg = -1;
  for (size_t i = 0; i < info.nargs; ++i) {
    const c10::IValue& v = args[i];
    switch (info.args[i].tag) {
      case A_TENSOR:
        // a _foreach_ op's `Tensor scalars` (addcmul/addcdiv .Tensor): n values in a CPU 1-D tensor
        if (v.isTensor() && !(info.foreach && v.toTensor().device().is_cpu() && v.toTensor().dim() == 1)) {
          dc.see(v.toTensor(), !info.args[i].write);
        }
        break;
      case A_TENSOR_LIST:
        if (v.isList()) {
          for (const c10::IValue& e : v.toListRef()) {
            if (e.isTensor()) dc.see(e.toTensor(), /*allow_cpu_scalar=*/info.foreach);
          }
        }
        break;
      case A_DEVICE:
        if (v.isDevice() && device_arg < 0 && v.toDevice().type() == kTpu) {
          device_arg = v.toDevice().has_index() ? v.toDevice().index() : current_device();
        }
        break;
      default: break;
    }
  }
  const c10::DeviceIndex device = dc.device >= 0 ? dc.device : device_arg >= 0 ? device_arg : current_device();
  if (C10_UNLIKELY(dc.stray.has_value())) throw_device_mismatch(c10::Device(kTpu, device), *dc.stray);
  return device;
}

// ---------------------------------------------------------------- marshalling

void scalar_ivalue_to(const c10::IValue& v, tpu_arg_t* a, const OpInfo& info) {
  if (v.isDouble()) {
    a->scalar_dtype = TPU_DTYPE_F64;
    a->f = v.toDouble();
  } else if (v.isInt()) {
    a->scalar_dtype = TPU_DTYPE_I64;
    a->i = v.toInt();
  } else if (v.isBool()) {
    a->scalar_dtype = TPU_DTYPE_BOOL;
    a->i = v.toBool();
  } else if (v.isSymInt()) {
    a->scalar_dtype = TPU_DTYPE_I64;
    a->i = v.toSymInt().guard_int(__FILE__, __LINE__);
  } else if (v.isSymFloat()) {
    a->scalar_dtype = TPU_DTYPE_F64;
    a->f = v.toSymFloat().guard_float(__FILE__, __LINE__);
  } else if (v.isSymBool()) {
    a->scalar_dtype = TPU_DTYPE_BOOL;
    a->i = v.toSymBool().guard_bool(__FILE__, __LINE__);
  } else if (v.isComplexDouble()) {
    C10_THROW_ERROR(NotImplementedError, "tpu does not support complex scalars (in " + info.name + ")");
  } else {
    C10_THROW_ERROR(TypeError, "tpu: expected a number, got " + v.tagKind() + " (in " + info.name + ")");
  }
}

// A CPU 0-dim tensor becomes a SCALAR record with the tensor's dtype.
void cpu_scalar_to(const at::Tensor& t, tpu_arg_t* a, const OpInfo& info) {
  const tpu_dtype_t dt = to_tpu_dtype_or_throw(t.scalar_type(), info.name.c_str());
  a->kind = TPU_ARG_SCALAR;
  a->scalar_dtype = dt;
  a->scalar_flags = t.unsafeGetTensorImpl()->is_wrapped_number() ? TPU_SCALAR_WRAPPED : TPU_SCALAR_ZERODIM;
  const void* p = t.const_data_ptr();
  switch (t.scalar_type()) {
    case c10::ScalarType::Float: a->f = *static_cast<const float*>(p); break;
    case c10::ScalarType::Double: a->f = *static_cast<const double*>(p); break;
    case c10::ScalarType::Half: a->f = static_cast<float>(*static_cast<const c10::Half*>(p)); break;
    case c10::ScalarType::BFloat16: a->f = static_cast<float>(*static_cast<const c10::BFloat16*>(p)); break;
    case c10::ScalarType::Long: a->i = *static_cast<const int64_t*>(p); break;
    case c10::ScalarType::Int: a->i = *static_cast<const int32_t*>(p); break;
    case c10::ScalarType::Short: a->i = *static_cast<const int16_t*>(p); break;
    case c10::ScalarType::Char: a->i = *static_cast<const int8_t*>(p); break;
    case c10::ScalarType::Byte: a->i = *static_cast<const uint8_t*>(p); break;
    case c10::ScalarType::Bool: a->i = *static_cast<const bool*>(p) ? 1 : 0; break;
    default: break;  // unreachable: to_tpu_dtype_or_throw rejected it
  }
}

// A _foreach_ op's list of CPU 0-dim tensors (a compiled optimizer's per-tensor scalars): its
// values as a Scalar[] (INT_LIST if all integral). False for any other list; pick_device admitted
// CPU 0-dim members only for _foreach_ ops, and a list mixing them with tpu tensors stops here.
bool cpu_scalar_list_to(c10::ArrayRef<c10::IValue> list, tpu_arg_t* a, Arena& arena) {
  if (list.empty()) return false;
  bool integral = true;
  for (const c10::IValue& e : list) {
    if (!e.isTensor() || !is_cpu_scalar(e.toTensor())) {
      for (const c10::IValue& f : list) {
        if (f.isTensor() && f.toTensor().defined() && !is_tpu(f.toTensor())) {
          throw_device_mismatch(c10::Device(kTpu, 0), f.toTensor().device());
        }
      }
      return false;
    }
    integral &= !c10::isFloatingType(e.toTensor().scalar_type());
  }
  if (integral) {
    int64_t* xs = arena.alloc<int64_t>(list.size());
    for (size_t j = 0; j < list.size(); ++j) xs[j] = list[j].toTensor().item<int64_t>();
    a->kind = TPU_ARG_INT_LIST;
    a->ints = xs;
  } else {
    double* xs = arena.alloc<double>(list.size());
    for (size_t j = 0; j < list.size(); ++j) xs[j] = list[j].toTensor().item<double>();
    a->kind = TPU_ARG_DOUBLE_LIST;
    a->doubles = xs;
  }
  a->len = static_cast<int64_t>(list.size());
  return true;
}

int64_t int_of(const c10::IValue& v) {
  if (v.isInt()) return v.toInt();
  return v.toSymInt().guard_int(__FILE__, __LINE__);
}

struct Marshalled {
  tpu_arg_t* args = nullptr;
  // Records of written tensors (schema order); nullptr entries are absent tensors.
  c10::SmallVector<const tpu_tensor_t*, 8> written;
};

void marshal(const OpInfo& info, c10::ArrayRef<c10::IValue> stack_args, Arena& arena, Marshalled& m) {
  const char* op = info.name.c_str();
  const size_t n = info.nargs;
  tpu_arg_t* args = arena.alloc<tpu_arg_t>(n);
  std::memset(args, 0, n * sizeof(tpu_arg_t));
  m.args = args;
  m.written.clear();
  for (size_t i = 0; i < n; ++i) {
    const c10::IValue& v = stack_args[i];
    const ArgInfo& ai = info.args[i];
    tpu_arg_t* a = &args[i];
    if (v.isNone()) {
      a->kind = ai.tag == A_GENERATOR ? TPU_ARG_GENERATOR : TPU_ARG_NONE;  // NULL generator = default
      if (ai.write && ai.tag == A_TENSOR) m.written.push_back(nullptr);
      continue;
    }
    switch (ai.tag) {
      case A_TENSOR: {
        const at::Tensor& t = v.toTensor();
        if (!t.defined()) {
          a->kind = TPU_ARG_NONE;
          if (ai.write) m.written.push_back(nullptr);
        } else if (is_tpu(t)) {
          tpu_tensor_t* r = arena.alloc<tpu_tensor_t>(1);
          fill_tensor_record(t, r, op);
          a->kind = TPU_ARG_TENSOR;
          a->tensor = r;
          if (ai.write) m.written.push_back(r);
        } else if (info.foreach && t.dim() == 1) {  // per-tensor scalars, as PyTorch's Scalar[]
          const at::Tensor d = t.to(c10::ScalarType::Double).contiguous();
          double* xs = arena.alloc<double>(static_cast<size_t>(d.numel()));
          std::memcpy(xs, d.const_data_ptr<double>(), static_cast<size_t>(d.numel()) * sizeof(double));
          a->kind = TPU_ARG_DOUBLE_LIST;
          a->doubles = xs;
          a->len = d.numel();
        } else {
          cpu_scalar_to(t, a, info);  // pick_device admitted only CPU 0-dim tensors (and the above)
        }
        break;
      }
      case A_TENSOR_LIST: {
        c10::ArrayRef<c10::IValue> list = v.toListRef();
        if (info.foreach && cpu_scalar_list_to(list, a, arena)) break;
        tpu_tensor_t* rs = arena.alloc<tpu_tensor_t>(list.size());
        for (size_t j = 0; j < list.size(); ++j) {
          const c10::IValue& e = list[j];
          if (e.isTensor() && e.toTensor().defined()) {
            fill_tensor_record(e.toTensor(), &rs[j], op);
            if (ai.write) m.written.push_back(&rs[j]);
          } else {
            fill_absent_record(&rs[j]);
            if (ai.write) m.written.push_back(nullptr);
          }
        }
        a->kind = TPU_ARG_TENSOR_LIST;
        a->tensors = rs;
        a->len = static_cast<int64_t>(list.size());
        break;
      }
      case A_SCALAR:
        a->kind = TPU_ARG_SCALAR;
        a->scalar_flags = TPU_SCALAR_WRAPPED;
        scalar_ivalue_to(v, a, info);
        break;
      case A_SCALAR_LIST: {
        // No SCALAR_LIST kind in tpurt.h: all-integral lists go as INT_LIST, others as DOUBLE_LIST.
        c10::ArrayRef<c10::IValue> list = v.toListRef();
        bool integral = true;
        for (const c10::IValue& e : list) {
          if (e.isComplexDouble()) {
            C10_THROW_ERROR(NotImplementedError, "tpu does not support complex scalars (in " + info.name + ")");
          }
          integral &= e.isInt() || e.isBool() || e.isSymInt();
        }
        if (integral) {
          int64_t* xs = arena.alloc<int64_t>(list.size());
          for (size_t j = 0; j < list.size(); ++j) xs[j] = list[j].isBool() ? list[j].toBool() : int_of(list[j]);
          a->kind = TPU_ARG_INT_LIST;
          a->ints = xs;
        } else {
          double* xs = arena.alloc<double>(list.size());
          for (size_t j = 0; j < list.size(); ++j) xs[j] = list[j].isDouble() ? list[j].toDouble() : list[j].toScalar().toDouble();
          a->kind = TPU_ARG_DOUBLE_LIST;
          a->doubles = xs;
        }
        a->len = static_cast<int64_t>(list.size());
        break;
      }
      case A_INT:
        a->kind = TPU_ARG_INT;
        a->i = int_of(v);
        break;
      case A_DOUBLE:
        a->kind = TPU_ARG_DOUBLE;
        a->f = v.isDouble() ? v.toDouble() : v.toSymFloat().guard_float(__FILE__, __LINE__);
        break;
      case A_BOOL:
        a->kind = TPU_ARG_BOOL;
        a->i = v.isBool() ? v.toBool() : v.toSymBool().guard_bool(__FILE__, __LINE__);
        break;
      case A_INT_LIST: {
        if (v.isInt() || v.isSymInt()) {  // int[1] given as a single int
          int64_t* xs = arena.alloc<int64_t>(1);
          xs[0] = int_of(v);
          a->kind = TPU_ARG_INT_LIST;
          a->ints = xs;
          a->len = 1;
          break;
        }
        c10::ArrayRef<c10::IValue> list = v.toListRef();
        int64_t* xs = arena.alloc<int64_t>(list.size());
        for (size_t j = 0; j < list.size(); ++j) xs[j] = int_of(list[j]);
        a->kind = TPU_ARG_INT_LIST;
        a->ints = xs;
        a->len = static_cast<int64_t>(list.size());
        break;
      }
      case A_DOUBLE_LIST: {
        c10::ArrayRef<c10::IValue> list = v.toListRef();
        double* xs = arena.alloc<double>(list.size());
        for (size_t j = 0; j < list.size(); ++j) xs[j] = list[j].toDouble();
        a->kind = TPU_ARG_DOUBLE_LIST;
        a->doubles = xs;
        a->len = static_cast<int64_t>(list.size());
        break;
      }
      case A_BOOL_LIST: {
        c10::ArrayRef<c10::IValue> list = v.toListRef();
        int64_t* xs = arena.alloc<int64_t>(list.size());
        for (size_t j = 0; j < list.size(); ++j) xs[j] = list[j].toBool() ? 1 : 0;
        a->kind = TPU_ARG_BOOL_LIST;
        a->ints = xs;
        a->len = static_cast<int64_t>(list.size());
        break;
      }
      case A_STRING:
        a->kind = TPU_ARG_STRING;
        a->str = v.toStringRef().c_str();  // owned by the IValue on the stack
        break;
      case A_GENERATOR:
        a->kind = TPU_ARG_GENERATOR;
        a->generator = runtime_generator(v.toGenerator());
        break;
      case A_DTYPE:
        a->kind = TPU_ARG_INT;
        a->i = to_tpu_dtype_or_throw(static_cast<c10::ScalarType>(v.toInt()), op);
        break;
      case A_LAYOUT:
        a->kind = TPU_ARG_INT;
        a->i = v.toInt();
        break;
      case A_DEVICE:
        a->kind = TPU_ARG_INT;
        a->i = v.toDevice().has_index() ? v.toDevice().index() : current_device();
        break;
      case A_OTHER:
      default:
        C10_THROW_ERROR(NotImplementedError, "tpu: argument " + std::to_string(i) + " of " + info.name +
                                                 " has a type the tpu backend cannot pass (" + v.tagKind() + ")");
    }
  }
}

// ---------------------------------------------------------------- output shapes

at::Tensor empty_tpu(c10::DeviceIndex device, c10::IntArrayRef sizes, c10::IntArrayRef strides,
                     c10::ScalarType dtype) {
  // the allocator allocates on the current device; the boxed kernel has usually made `device`
  // current already (a DeviceGuard costs ~100 instructions of a tiny op even when it changes nothing)
  c10::OptionalDeviceGuard guard;
  if (C10_UNLIKELY(device != current_device())) guard.reset_device(c10::Device(kTpu, device));
  return at::detail::empty_strided_generic(sizes, strides, tpu_allocator(),
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), dtype);
}

at::Tensor to_meta(const at::Tensor& t) {
  return at::detail::empty_strided_meta(t.sizes(), t.strides(), t.scalar_type());
}

c10::IValue to_meta_ivalue(const c10::IValue& v, ArgTag tag) {
  switch (tag) {
    case A_TENSOR:
      if (v.isTensor() && v.toTensor().defined() && is_tpu(v.toTensor())) return to_meta(v.toTensor());
      return v;
    case A_TENSOR_LIST:
      if (v.isTensorList()) {
        c10::List<at::Tensor> out;
        out.reserve(v.toListRef().size());
        for (const c10::IValue& e : v.toListRef()) {
          const at::Tensor& t = e.toTensor();
          out.push_back(t.defined() && is_tpu(t) ? to_meta(t) : t);
        }
        return out;
      }
      if (v.isList()) {
        c10::List<std::optional<at::Tensor>> out;
        out.reserve(v.toListRef().size());
        for (const c10::IValue& e : v.toListRef()) {
          if (e.isTensor() && e.toTensor().defined()) {
            const at::Tensor& t = e.toTensor();
            out.push_back(is_tpu(t) ? to_meta(t) : t);
          } else {
            out.push_back(std::nullopt);
          }
        }
        return out;
      }
      return v;
    case A_DEVICE:
      if (v.isDevice() && v.toDevice().type() == kTpu) return c10::Device(c10::DeviceType::Meta);
      return v;
    case A_GENERATOR: return c10::IValue();  // meta functions never draw random numbers
    default: return v;
  }
}

// Output metadata computed by the meta function: per return, its tensors' metadata
// (one for Tensor, n for Tensor[]), and the shapes out= arguments were resized to.
struct TMeta {
  bool defined = false;
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  c10::SmallVector<int64_t, 6> sizes, strides;
};

TMeta tmeta_of(const at::Tensor& t) {
  TMeta m;
  if (!t.defined()) return m;
  m.defined = true;
  m.dtype = t.scalar_type();
  m.sizes.assign(t.sizes().begin(), t.sizes().end());
  m.strides.assign(t.strides().begin(), t.strides().end());
  return m;
}

struct MetaShapes {
  std::vector<std::vector<TMeta>> rets;        // index = return index
  std::vector<std::pair<size_t, TMeta>> outs;  // (argument index, shape after the meta out= call)
  // int returns the meta function computed (index = return index): a meta function cannot
  // read data, so a concrete int from it depends on shapes only (SDPA's max_q / max_k). The
  // glue returns it instead of reading the device's 0-dim result back (a synchronization).
  std::vector<std::optional<int64_t>> ints;
  bool failed = false;  // the meta function threw for these arguments (e.g. data-dependent shapes)
};

// Re-dispatches the op with tpu tensors replaced by meta tensors. Throws what the
// meta function throws.
MetaShapes run_meta(const c10::OperatorHandle& op, const OpInfo& info, c10::ArrayRef<c10::IValue> args) {
  torch::jit::Stack meta_stack;
  meta_stack.reserve(info.nargs);
  c10::SmallVector<std::pair<size_t, at::Tensor>, 2> meta_outs;
  for (size_t i = 0; i < info.nargs; ++i) {
    meta_stack.push_back(to_meta_ivalue(args[i], info.args[i].tag));
    if (info.args[i].out && info.args[i].tag == A_TENSOR && meta_stack.back().isTensor()) {
      meta_outs.emplace_back(i, meta_stack.back().toTensor());
    }
  }
  {
    c10::impl::ExcludeDispatchKeyGuard no_autograd(c10::autograd_dispatch_keyset_with_ADInplaceOrView |
                                                   c10::autocast_dispatch_keyset);
    op.callBoxed(meta_stack);
  }
  MetaShapes r;
  r.rets.resize(info.nrets);
  r.ints.resize(info.nrets);
  for (size_t k = 0; k < info.nrets && k < meta_stack.size(); ++k) {
    const c10::IValue& v = meta_stack[k];
    if (info.rets[k].tag == R_INT && v.isInt()) r.ints[k] = v.toInt();
    if (info.rets[k].tag == R_TENSOR) {
      r.rets[k].push_back(v.isTensor() ? tmeta_of(v.toTensor()) : TMeta());
    } else if (info.rets[k].tag == R_TENSOR_LIST) {
      for (const c10::IValue& e : v.toListRef()) r.rets[k].push_back(tmeta_of(e.toTensor()));
    }
  }
  for (const auto& [i, t] : meta_outs) r.outs.emplace_back(i, tmeta_of(t));
  return r;
}

// ---- meta cache: the meta re-dispatch costs microseconds in C++ and ~1 ms for ops
// whose meta function is Python (torch._refs, e.g. relu), so its results are cached
// per op, keyed by every argument that can influence them: tensor dtype/sizes/strides
// (CPU scalars: dtype and wrapped-ness), and the values of all non-tensor arguments.

using MetaKey = c10::SmallVector<int64_t, 64>;

void key_tensor(MetaKey& key, const at::Tensor& t) {
  if (!t.defined()) {
    key.push_back(-1);
    return;
  }
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  const bool tpu = impl->device_type() == kTpu;
  key.push_back(static_cast<int64_t>(impl->dtype().toScalarType()) | (tpu ? 0x100 : 0x200) |
                (impl->is_wrapped_number() ? 0x400 : 0));
  if (!tpu) return;  // a CPU 0-dim tensor: its value never shapes the outputs
  // dim, sizes, strides written in place (two append()s cost ~80 instructions a tensor)
  const c10::IntArrayRef sizes = impl->sizes(), strides = impl->strides();
  const size_t dim = sizes.size(), n = key.size();
  key.reserve(n + 1 + 2 * dim);
  int64_t* p = key.data() + n;
  p[0] = static_cast<int64_t>(dim);
  for (size_t d = 0; d < dim; ++d) {
    p[1 + d] = sizes[d];
    p[1 + dim + d] = strides[d];
  }
  key.set_size(n + 1 + 2 * dim);
}

int64_t bits_of(double d) {
  int64_t b;
  std::memcpy(&b, &d, sizeof b);
  return b;
}

void key_number(MetaKey& key, const c10::IValue& v) {
  if (v.isDouble()) {
    key.push_back(1);
    key.push_back(bits_of(v.toDouble()));
  } else if (v.isInt()) {
    key.push_back(2);
    key.push_back(v.toInt());
  } else if (v.isBool()) {
    key.push_back(3);
    key.push_back(v.toBool());
  } else {  // symbolic or complex: hash its printed form
    key.push_back(4);
    key.push_back(static_cast<int64_t>(std::hash<std::string>{}(c10::str(v))));
  }
}

// False if some argument cannot be keyed (then the meta function runs every time).
bool build_meta_key(const OpInfo& info, c10::ArrayRef<c10::IValue> args, MetaKey& key) {
  key.push_back(static_cast<int64_t>(c10::get_default_dtype_as_scalartype()));  // int / int division's dtype
  for (size_t i = 0; i < info.nargs; ++i) {
    const c10::IValue& v = args[i];
    if (v.isNone()) {
      key.push_back(INT64_MIN);
      continue;
    }
    switch (info.args[i].tag) {
      case A_TENSOR: key_tensor(key, v.toTensor()); break;
      case A_TENSOR_LIST: {
        c10::ArrayRef<c10::IValue> list = v.toListRef();
        key.push_back(static_cast<int64_t>(list.size()));
        for (const c10::IValue& e : list) {
          if (e.isTensor()) key_tensor(key, e.toTensor());
          else key.push_back(-1);
        }
        break;
      }
      case A_SCALAR:
      case A_INT:
      case A_DOUBLE:
      case A_BOOL:
      case A_DTYPE:
      case A_LAYOUT: key_number(key, v); break;
      case A_SCALAR_LIST:
      case A_INT_LIST:
      case A_DOUBLE_LIST:
      case A_BOOL_LIST: {
        if (!v.isList()) {
          key_number(key, v);
          break;
        }
        c10::ArrayRef<c10::IValue> list = v.toListRef();
        key.push_back(static_cast<int64_t>(list.size()));
        for (const c10::IValue& e : list) key_number(key, e);
        break;
      }
      case A_STRING:
        key.push_back(static_cast<int64_t>(std::hash<std::string>{}(v.toStringRef())));
        break;
      case A_GENERATOR:
      case A_DEVICE: key.push_back(0); break;
      default: return false;
    }
  }
  return true;
}

uint64_t hash_key(const MetaKey& key) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (int64_t x : key) {
    h ^= static_cast<uint64_t>(x);
    h *= 0x100000001b3ull;
    h ^= h >> 29;
  }
  return h;
}

// Per-thread direct-mapped slots of recent hits in front of the caches' mutex and maps (the locked
// lookup cost ~160 instructions a call). An entry's value depends only on its op and key (the cache
// is only ever cleared to bound its size), so a slot stays correct for as long as it lives; OpInfos,
// hence MetaCaches, are never freed (op_info retires them), so a cache's address names one op.
struct MetaHitSlot {
  const MetaCache* cache = nullptr;
  uint64_t h = 0;
  std::vector<int64_t> key;
  std::shared_ptr<const MetaShapes> v;
};
constexpr size_t kMetaHitSlots = 32;

// The slots' owner has a destructor (thread_local access through a guard and wrapper, ~45
// instructions); the per-call path reads a trivial thread_local pointer to it instead. After the
// owner is destroyed (thread exit) the slots are off: an op run by a later destructor skips them.
thread_local MetaHitSlot* t_meta_hits = nullptr;
thread_local bool t_meta_hits_gone = false;

struct MetaHitOwner {
  std::array<MetaHitSlot, kMetaHitSlots> slots;
  ~MetaHitOwner() {
    t_meta_hits = nullptr;
    t_meta_hits_gone = true;
  }
};

C10_NOINLINE MetaHitSlot* meta_hits_init() {
  if (t_meta_hits_gone) return nullptr;
  thread_local MetaHitOwner owner;
  t_meta_hits = owner.slots.data();
  return t_meta_hits;
}

// nullptr while the thread exits
inline MetaHitSlot* meta_hit_slot(const MetaCache& cache, uint64_t h) {
  MetaHitSlot* hits = t_meta_hits;
  if (C10_UNLIKELY(!hits) && !(hits = meta_hits_init())) return nullptr;
  return &hits[(h ^ (reinterpret_cast<uintptr_t>(&cache) >> 4)) % kMetaHitSlots];
}

void meta_hit_remember(MetaHitSlot* s, const MetaCache& cache, uint64_t h, const MetaKey& key,
                       const std::shared_ptr<const MetaShapes>& v) {
  if (!s) return;
  s->cache = &cache;
  s->h = h;
  s->key.assign(key.begin(), key.end());
  s->v = v;
}

std::shared_ptr<const MetaShapes> meta_cache_find(MetaCache& cache, uint64_t h, const MetaKey& key) {
  MetaHitSlot* slot = meta_hit_slot(cache, h);
  if (slot && slot->cache == &cache && slot->h == h && slot->key.size() == key.size() &&
      std::equal(key.begin(), key.end(), slot->key.begin()))
    return slot->v;
  std::shared_ptr<const MetaShapes> hit;
  {
    std::lock_guard<std::mutex> lock(cache.mu);
    auto it = cache.map.find(h);
    if (it == cache.map.end()) return nullptr;
    for (const auto& [k, v] : it->second) {
      if (k.size() == key.size() && std::equal(k.begin(), k.end(), key.begin())) {
        hit = v;
        break;
      }
    }
  }
  if (hit) meta_hit_remember(slot, cache, h, key, hit);
  return hit;
}

void meta_cache_insert(MetaCache& cache, uint64_t h, const MetaKey& key, std::shared_ptr<const MetaShapes> v) {
  meta_hit_remember(meta_hit_slot(cache, h), cache, h, key, v);
  std::lock_guard<std::mutex> lock(cache.mu);
  if (cache.entries >= kMetaCacheMaxEntries) {
    cache.map.clear();
    cache.entries = 0;
  }
  cache.map[h].emplace_back(std::vector<int64_t>(key.begin(), key.end()), std::move(v));
  ++cache.entries;
}

c10::ScalarType from_tpu_dtype(int32_t dt);

// The op's C shape rule (tpu_op_shapes_found) on marshalled arguments: its result records as TMetas
// (contiguous strides) in *out. False when the op has none or it declines these arguments (its reason
// to *declined if given); any other error is the op's and is raised.
bool shape_rule_metas(const OpInfo& info, const tpu_arg_t* args, c10::DeviceIndex device,
                      c10::SmallVector<TMeta, 4>* out, std::string* declined) {
  constexpr int kMaxOuts = 16;
  tpu_tensor_t recs[kMaxOuts];
  int n = 0;
  tpu_status_t st = tpu_op_shapes_found(info.op, device, args, static_cast<int>(info.nargs), recs, kMaxOuts, &n);
  if (st != TPU_OK) {
    if (tpu_status_code(st) != TPU_STATUS_UNSUPPORTED) throw_status(st);
    if (declined != nullptr) *declined = tpu_status_message(st);
    tpu_status_free(st);
    return false;
  }
  out->clear();
  for (int k = 0; k < n; ++k) {
    const c10::IntArrayRef sizes(recs[k].sizes, recs[k].ndim);
    const c10::SmallVector<int64_t, 5> strides = c10::contiguous_strides(sizes);
    TMeta t;
    t.defined = true;
    t.dtype = from_tpu_dtype(recs[k].dtype);
    t.sizes.assign(sizes.begin(), sizes.end());
    t.strides.assign(strides.begin(), strides.end());
    out->push_back(std::move(t));
  }
  return true;
}

// The op's pure C shape rule (ops whose meta function is Python, e.g. embedding_bag, or missing) for a
// functional op with only Tensor returns; nullptr when it has none or declines these arguments (the
// meta function then runs, with its checks and errors).
std::shared_ptr<const MetaShapes> rule_shapes(const OpInfo& info, c10::ArrayRef<c10::IValue> args,
                                              c10::DeviceIndex device) {
  if (!info.shape_rule) return nullptr;
  c10::SmallVector<TMeta, 4> metas;
  {
    Arena arena;
    Marshalled m;
    try {
      marshal(info, args, arena, m);
    } catch (const std::exception&) {
      return nullptr;
    }
    if (!shape_rule_metas(info, m.args, device, &metas, nullptr) || metas.size() != info.nrets) return nullptr;
  }
  auto r = std::make_shared<MetaShapes>();
  r->rets.resize(info.nrets);
  r->ints.resize(info.nrets);
  for (size_t k = 0; k < info.nrets; ++k) r->rets[k].push_back(std::move(metas[k]));
  return r;
}

// Meta hint (compile path, set_meta_hint): the results' layouts of the next call of one op on this thread.
struct MetaHint {
  std::string name;
  std::shared_ptr<const MetaShapes> shapes;
};
thread_local MetaHint tl_meta_hint;
std::atomic<uint64_t> g_meta_hints_used{0};

// A hint stands in for the meta function only for functional ops whose returns are all Tensor / Tensor[].
bool hint_fits(const OpInfo& info, const MetaShapes& s) {
  if (info.has_out || s.rets.size() != info.nrets) return false;
  for (size_t k = 0; k < info.nrets; ++k) {
    if (info.rets[k].tag == R_TENSOR_LIST) continue;
    if (info.rets[k].tag != R_TENSOR || s.rets[k].size() != 1 || !s.rets[k][0].defined) return false;
  }
  return true;
}

// The meta function's results for this call, from the cache, a meta hint, the op's C shape rule or by running it.
std::shared_ptr<const MetaShapes> meta_shapes(const c10::OperatorHandle& op, const OpInfo& info,
                                              c10::ArrayRef<c10::IValue> args, c10::DeviceIndex device) {
  MetaKey key;
  if (!build_meta_key(info, args, key)) return std::make_shared<const MetaShapes>(run_meta(op, info, args));
  const uint64_t h = hash_key(key);
  MetaCache& cache = *info.meta_cache;
  if (auto hit = meta_cache_find(cache, h, key)) return hit;
  std::shared_ptr<const MetaShapes> hint;
  if (C10_UNLIKELY(tl_meta_hint.shapes != nullptr)) {  // the first miss takes the hint (another op's: dropped)
    hint = std::move(tl_meta_hint.shapes);
    tl_meta_hint.shapes = nullptr;
    if (tl_meta_hint.name != info.name || !hint_fits(info, *hint)) hint = nullptr;
  }
  std::shared_ptr<const MetaShapes> shapes = rule_shapes(info, args, device);
  if (shapes) {
    meta_cache_insert(cache, h, key, shapes);
    return shapes;
  }
  if (hint) {  // in place of the meta function only (a C shape rule, above, is what eager uses)
    // for this call only: not cached, so no later eager call ever takes FakeTensor's layouts for the meta
    // function's (they agree on every hinted node of the examples, tests/test_compile.py, but nothing proves it
    // for every op); a capture's later nodes with the same key take their own hints
    g_meta_hints_used.fetch_add(1, std::memory_order_relaxed);
    return hint;
  }
  try {
    shapes = std::make_shared<const MetaShapes>(run_meta(op, info, args));
  } catch (const std::exception&) {
    // Remember the failure (it depends only on the key), so that data-dependent ops
    // go straight to their C shape rule next time instead of paying for an exception.
    auto failed = std::make_shared<MetaShapes>();
    failed->failed = true;
    meta_cache_insert(cache, h, key, std::move(failed));
    throw;
  }
  meta_cache_insert(cache, h, key, shapes);
  return shapes;
}

bool any_empty_out(const OpInfo& info, c10::ArrayRef<c10::IValue> args) {
  for (size_t i = 0; i < info.nargs; ++i) {
    if (info.args[i].out && args[i].isTensor()) {
      const at::Tensor& t = args[i].toTensor();
      if (t.defined() && t.numel() == 0) return true;
    }
  }
  return false;
}

// Fresh results (one IValue per return; aliased returns stay None here).
using Results = c10::SmallVector<c10::IValue, 4>;

at::Tensor empty_tpu_from(c10::DeviceIndex device, const TMeta& m) {
  if (!m.defined) return at::Tensor();
  return empty_tpu(device, m.sizes, m.strides, m.dtype);
}

void alloc_from_meta(const OpInfo& info, const MetaShapes& meta, c10::DeviceIndex device, Results& fresh) {
  for (size_t k = 0; k < info.nrets; ++k) {
    const std::vector<TMeta>& ms = meta.rets[k];
    if (info.rets[k].tag == R_TENSOR) {
      fresh[k] = ms.empty() ? at::Tensor() : empty_tpu_from(device, ms[0]);
    } else if (info.rets[k].tag == R_TENSOR_LIST) {
      c10::List<at::Tensor> list;
      list.reserve(ms.size());
      for (const TMeta& m : ms) list.push_back(empty_tpu_from(device, m));
      fresh[k] = std::move(list);
    }
  }
}

// Resizes out= tensors whose shape differs from the meta function's.
void resize_outs(const MetaShapes& meta, c10::ArrayRef<c10::IValue> args) {
  for (const auto& [i, m] : meta.outs) {
    const at::Tensor& t = args[i].toTensor();
    if (m.defined && t.defined() && is_tpu(t) && c10::IntArrayRef(m.sizes) != t.sizes()) {
      resize_tpu_tensor(t, m.sizes, m.strides);
    }
  }
}

void alloc_scalar_returns(const OpInfo& info, c10::DeviceIndex device, Results& fresh) {
  for (size_t k = 0; k < info.nrets; ++k) {
    c10::ScalarType dt;
    switch (info.rets[k].tag) {
      case R_BOOL: dt = c10::ScalarType::Bool; break;
      case R_INT: dt = c10::ScalarType::Long; break;
      case R_DOUBLE: dt = c10::ScalarType::Double; break;
      default: continue;
    }
    fresh[k] = empty_tpu(device, {}, {}, dt);
  }
}

c10::ScalarType from_tpu_dtype(int32_t dt) {
  switch (dt) {
    case TPU_DTYPE_F32: return c10::ScalarType::Float;
    case TPU_DTYPE_F64: return c10::ScalarType::Double;
    case TPU_DTYPE_F16: return c10::ScalarType::Half;
    case TPU_DTYPE_BF16: return c10::ScalarType::BFloat16;
    case TPU_DTYPE_I64: return c10::ScalarType::Long;
    case TPU_DTYPE_I32: return c10::ScalarType::Int;
    case TPU_DTYPE_I16: return c10::ScalarType::Short;
    case TPU_DTYPE_I8: return c10::ScalarType::Char;
    case TPU_DTYPE_U8: return c10::ScalarType::Byte;
    case TPU_DTYPE_BOOL: return c10::ScalarType::Bool;
    default: TORCH_CHECK(false, "libtpurt returned an unknown dtype ", dt);
  }
}

// True when the meta re-dispatch failed for want of a meta kernel (NotImplementedError), not
// because the arguments are bad (whose error is PyTorch's own message, to be raised as is).
bool meta_is_missing(const std::exception_ptr& e) {
  if (!e) return true;
  try {
    std::rethrow_exception(e);
  } catch (const c10::NotImplementedError&) {
    return true;
  } catch (...) {
    return false;
  }
}

// After the meta function failed: the op's C shape rule's results (contiguous) for Tensor returns,
// fresh or out=. False when the op has none, declines these arguments or has a Tensor[] return; the
// rule's reason, if any, goes to *unsupported (e.g. "aten::unique_consecutive: the dim argument"), which
// names the argument better than a meta function that does not exist.
bool apply_infer(const OpInfo& info, c10::ArrayRef<c10::IValue> args, const Marshalled& m, c10::DeviceIndex device,
                 Results& fresh, std::string* unsupported) {
  for (const RetInfo& r : info.rets) {
    if (r.tag == R_TENSOR_LIST) return false;
  }
  c10::SmallVector<TMeta, 4> metas;
  if (!shape_rule_metas(info, m.args, device, &metas, unsupported)) return false;
  for (size_t k = 0; k < info.nrets && k < metas.size(); ++k) {
    if (info.rets[k].tag == R_TENSOR) {
      fresh[k] = empty_tpu_from(device, metas[k]);
    } else if (info.rets[k].tag == R_ALIAS) {
      const c10::IValue& v = args[info.rets[k].arg];
      const c10::IntArrayRef sizes(metas[k].sizes);
      if (v.isTensor() && v.toTensor().defined() && v.toTensor().sizes() != sizes) resize_tpu_tensor(v.toTensor(), sizes);
    }
  }
  return true;
}

// Reads a 0-dim tpu result back as a Python number (synchronizes the device).
c10::IValue read_scalar_result(const at::Tensor& t, RetTag tag) {
  alignas(8) unsigned char buf[8] = {0};
  check_status(tpu_rt_memcpy_d2h(t.device().index(), buf, t.const_data_ptr(), t.element_size()));
  switch (tag) {
    case R_BOOL: return c10::IValue(*reinterpret_cast<bool*>(buf));
    case R_INT: return c10::IValue(*reinterpret_cast<int64_t*>(buf));
    default: return c10::IValue(*reinterpret_cast<double*>(buf));
  }
}

// ---------------------------------------------------------------- the kernel

// Meta functions of data-dependent ops (nonzero, ...) raise NotImplementedError; that is
// not a user error, unlike e.g. arange's "step must be nonzero".
bool is_data_dependent_error(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const c10::NotImplementedError&) {
    return true;
  } catch (const std::exception& ex) {
    const std::string what = ex.what();
    return what.find("NotImplementedError") != std::string::npos || what.find("data-dependent") != std::string::npos ||
           what.find("data dependent") != std::string::npos;
  } catch (...) {
  }
  return false;
}

// Index lists (`Tensor?[]`, as in x[idx] / x[idx] = v) may hold CPU tensors; like
// CUDA, they are moved to the op's device (a copy, no computation on the CPU).
void move_cpu_indices(const c10::OperatorHandle& op, const OpInfo& info, torch::jit::Stack* stack) {
  const size_t base = stack->size() - info.nargs;
  for (size_t i = 0; i < info.nargs; ++i) {
    if (info.args[i].tag != A_TENSOR_LIST || !(*stack)[base + i].isList()) continue;
    c10::ArrayRef<c10::IValue> list = (*stack)[base + i].toListRef();
    bool has_cpu = false;
    for (const c10::IValue& e : list) has_cpu |= e.isTensor() && e.toTensor().defined() && !is_tpu(e.toTensor());
    if (C10_LIKELY(!has_cpu)) continue;
    const c10::TypePtr& t = op.schema().arguments()[i].type();
    const auto* lt = t->castRaw<c10::ListType>();
    if (!lt || lt->getElementType()->kind() != c10::TypeKind::OptionalType) continue;
    c10::DeviceIndex dev = -1;
    for (size_t j = 0; j < info.nargs && dev < 0; ++j) {
      const c10::IValue& v = (*stack)[base + j];
      if (v.isTensor() && v.toTensor().defined() && is_tpu(v.toTensor())) dev = v.toTensor().device().index();
    }
    if (dev < 0) continue;  // no tpu tensor: pick_device reports the mismatch
    c10::List<std::optional<at::Tensor>> moved;
    for (const c10::IValue& e : list) {
      if (e.isTensor() && e.toTensor().defined()) {
        const at::Tensor& x = e.toTensor();
        moved.push_back(is_tpu(x) ? x : x.to(c10::Device(kTpu, dev)));
      } else {
        moved.push_back(std::nullopt);
      }
    }
    (*stack)[base + i] = c10::IValue(moved);
  }
}

bool run_on_device(const c10::OperatorHandle& op, const OpInfo& info, torch::jit::Stack* stack,
                   c10::ArrayRef<c10::IValue> args, c10::DeviceIndex device, bool check_outs);

void tpu_boxed_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const OpInfo& info = op_info(op);
  if (C10_UNLIKELY(!info.supported)) {
    if (cpu_fallback_enabled()) return run_cpu_fallback(op, info, stack);
    throw_not_implemented(info);
  }
  if (C10_UNLIKELY(info.has_view)) {
    C10_THROW_ERROR(NotImplementedError, "torch_tpu: the view operator '" + info.name +
                                             "' reached the tpu fallback kernel; it must be registered as a "
                                             "metadata-only kernel in csrc/glue/tensor_factory.cpp (please report)");
  }
  if (C10_UNLIKELY(info.bad_ret)) {
    C10_THROW_ERROR(NotImplementedError, "torch_tpu: '" + info.name + "' has a return type the tpu backend cannot "
                                                                       "produce");
  }

  if (info.has_tensor_list) move_cpu_indices(op, info, stack);
  c10::ArrayRef<c10::IValue> args = torch::jit::last(*stack, info.nargs);
  const c10::DeviceIndex device = pick_device(info, args);
  c10::OptionalDeviceGuard guard;  // set only when the op's device is not already current
  if (device != current_device()) guard.reset_device(c10::Device(kTpu, device));
  if (C10_UNLIKELY(!run_on_device(op, info, stack, args, device, /*check_outs=*/false))) {
    run_on_device(op, info, stack, args, device, /*check_outs=*/true);
  }
}

// True if an out= tensor's shape differs from what the meta function computes.
bool outs_mismatch(const c10::OperatorHandle& op, const OpInfo& info, c10::ArrayRef<c10::IValue> args,
                   c10::DeviceIndex device) {
  try {
    std::shared_ptr<const MetaShapes> meta = meta_shapes(op, info, args, device);
    if (meta->failed) return false;
    for (const auto& [i, m] : meta->outs) {
      const at::Tensor& t = args[i].toTensor();
      if (m.defined && t.defined() && c10::IntArrayRef(m.sizes) != t.sizes()) return true;
    }
  } catch (const std::exception&) {
  }
  return false;
}

// Runs the op; returns false (having done nothing) when the lowering rejected out=
// tensors of the wrong shape, so that the caller retries with check_outs (which
// resizes them first, as ATen's resize_output does, warning included).
bool run_on_device(const c10::OperatorHandle& op, const OpInfo& info, torch::jit::Stack* stack,
                   c10::ArrayRef<c10::IValue> args, c10::DeviceIndex device, bool check_outs) {
  Results fresh(info.nrets);
  bool need_infer = false;
  std::exception_ptr meta_error;
  const bool meta_for_outs = info.has_out && (check_outs || any_empty_out(info, args));
  std::shared_ptr<const MetaShapes> meta;  // set when the meta function ran (or was cached) and succeeded
  if (info.via_out) {
    MetaKey key;
    const bool keyed = build_meta_key(info, args, key);
    const uint64_t h = keyed ? hash_key(key) : 0;
    if (keyed) meta = meta_cache_find(*info.meta_cache, h, key);
    if (!meta) {  // a new signature: PyTorch's kernel (checks, sizes the results, calls the .out overload)
      info.composite->callBoxed(op, c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), stack);
      if (keyed) {
        auto learned = std::make_shared<MetaShapes>();
        learned->rets.resize(info.nrets);
        c10::ArrayRef<c10::IValue> res = torch::jit::last(*stack, info.nrets);
        for (size_t k = 0; k < info.nrets; ++k) learned->rets[k].push_back(tmeta_of(res[k].toTensor()));
        meta_cache_insert(*info.meta_cache, h, key, std::move(learned));
      }
      return true;
    }
    alloc_from_meta(info, *meta, device, fresh);
  } else if (info.needs_meta || meta_for_outs) {
    try {
      meta = meta_shapes(op, info, args, device);
      if (meta->failed) {
        meta = nullptr;
        need_infer = true;
      } else {
        resize_outs(*meta, args);
        alloc_from_meta(info, *meta, device, fresh);
      }
    } catch (const std::exception&) {
      meta = nullptr;
      meta_error = std::current_exception();
      need_infer = true;
    }
  }
  if (info.scalar_rets) alloc_scalar_returns(info, device, fresh);

  Arena arena;
  Marshalled m;
  marshal(info, args, arena, m);
  if (C10_UNLIKELY(need_infer)) {
    std::string unsupported;
    const bool inferred = apply_infer(info, args, m, device, fresh, &unsupported);
    if (!inferred && !meta_error) {
      // A cached meta failure and no shape rule for these arguments: the meta function runs again for its
      // error, so a repeated bad call raises what the first one raised (not a generic error, nor no error).
      try {
        run_meta(op, info, args);
      } catch (const std::exception&) {
        meta_error = std::current_exception();
      }
    }
    if (inferred) {
      arena.reset();
      marshal(info, args, arena, m);  // out= tensors may have been resized
    } else if (!info.needs_meta && meta_error && !is_data_dependent_error(meta_error)) {
      std::rethrow_exception(meta_error);  // e.g. arange(0, 5, 0, out=...): the meta function's error
    } else if (info.needs_meta) {
      if (!cpu_fallback_enabled()) {
        if (!unsupported.empty() && meta_is_missing(meta_error)) {  // no meta kernel: say what infer lacks
          C10_THROW_ERROR(NotImplementedError, unsupported + " is not supported on tpu. As a temporary, slow fix, set "
                                                     "TORCH_TPU_CPU_FALLBACK=1 to run it on the CPU.");
        }
        if (meta_error) std::rethrow_exception(meta_error);
        C10_THROW_ERROR(Error, "torch_tpu: cannot compute the output shapes of " + info.name);
      }
      run_cpu_fallback(op, info, stack);
      return true;
    }
  }

  // outs: written arguments' tensors, then fresh results.
  size_t nfresh = 0;
  for (size_t k = 0; k < info.nrets; ++k) {
    if (info.rets[k].tag == R_TENSOR || info.rets[k].tag == R_BOOL || info.rets[k].tag == R_INT ||
        info.rets[k].tag == R_DOUBLE) {
      nfresh += 1;
    } else if (info.rets[k].tag == R_TENSOR_LIST && fresh[k].isList()) {
      nfresh += fresh[k].toListRef().size();
    }
  }
  const size_t nouts = m.written.size() + nfresh;
  tpu_tensor_t* outs = arena.alloc<tpu_tensor_t>(nouts == 0 ? 1 : nouts);
  size_t o = 0;
  for (const tpu_tensor_t* w : m.written) {
    if (w != nullptr) outs[o] = *w;
    else fill_absent_record(&outs[o]);
    ++o;
  }
  const char* name = info.name.c_str();
  for (size_t k = 0; k < info.nrets; ++k) {
    switch (info.rets[k].tag) {
      case R_TENSOR:
      case R_BOOL:
      case R_INT:
      case R_DOUBLE: {
        if (fresh[k].isTensor() && fresh[k].toTensor().defined()) fill_tensor_record(fresh[k].toTensor(), &outs[o], name);
        else fill_absent_record(&outs[o]);
        ++o;
        break;
      }
      case R_TENSOR_LIST:
        if (!fresh[k].isList()) break;
        for (const c10::IValue& e : fresh[k].toListRef()) {
          if (e.toTensor().defined()) fill_tensor_record(e.toTensor(), &outs[o], name);
          else fill_absent_record(&outs[o]);
          ++o;
        }
        break;
      default: break;
    }
  }

  tpu_arg_t* run_args = m.args;
  size_t run_nargs = info.nargs;
  if (info.via_out) {  // the .out overload's arguments: these, then each fresh result as its out= tensor
    run_args = arena.alloc<tpu_arg_t>(info.nargs + nouts);
    std::memcpy(run_args, m.args, info.nargs * sizeof(tpu_arg_t));
    for (size_t k = 0; k < nouts; ++k) {
      tpu_arg_t* a = &run_args[info.nargs + k];
      std::memset(a, 0, sizeof *a);
      a->kind = outs[k].ndim >= 0 ? TPU_ARG_TENSOR : TPU_ARG_NONE;
      a->tensor = &outs[k];
    }
    run_nargs += nouts;
  }
  tpu_status_t st =
      tpu_op_run_found(info.op, device, run_args, static_cast<int>(run_nargs), outs, static_cast<int>(nouts));
  if (C10_UNLIKELY(st != TPU_OK)) {
    if (tpu_status_code(st) == TPU_STATUS_INVALID_ARGUMENT && info.has_out && !meta_for_outs &&
        outs_mismatch(op, info, args, device)) {
      tpu_status_free(st);
      return false;
    }
    if (tpu_status_code(st) == TPU_STATUS_UNSUPPORTED) {
      if (cpu_fallback_enabled()) {
        tpu_status_free(st);
        run_cpu_fallback(op, info, stack);
        return true;
      }
      std::string msg = tpu_status_message(st);
      tpu_status_free(st);
      C10_THROW_ERROR(NotImplementedError,
                      msg + ". As a temporary, slow fix, set TORCH_TPU_CPU_FALLBACK=1 to run it on the CPU.");
    }
    throw_status(st);
  }

  // Results, in schema return order.
  Results results(info.nrets);
  for (size_t k = 0; k < info.nrets; ++k) {
    switch (info.rets[k].tag) {
      case R_ALIAS: results[k] = args[info.rets[k].arg]; break;
      case R_INT:
        if (meta && k < meta->ints.size() && meta->ints[k].has_value()) {
          results[k] = *meta->ints[k];  // shape-derived: no device read-back (see MetaShapes::ints)
          break;
        }
        [[fallthrough]];
      case R_BOOL:
      case R_DOUBLE: results[k] = read_scalar_result(fresh[k].toTensor(), info.rets[k].tag); break;
      case R_TENSOR: results[k] = fresh[k].isTensor() ? std::move(fresh[k]) : c10::IValue(at::Tensor()); break;
      default: results[k] = std::move(fresh[k]); break;
    }
  }
  torch::jit::drop(*stack, info.nargs);
  for (c10::IValue& r : results) stack->push_back(std::move(r));
  return true;
}

}  // namespace

uint64_t meta_hints_used() noexcept { return g_meta_hints_used.load(std::memory_order_relaxed); }

void set_meta_hint(const std::string& name, const std::vector<std::vector<at::Tensor>>& rets) {
  if (name.empty()) {
    tl_meta_hint.shapes = nullptr;
    return;
  }
  auto s = std::make_shared<MetaShapes>();
  s->rets.resize(rets.size());
  s->ints.resize(rets.size());
  for (size_t k = 0; k < rets.size(); ++k) {
    for (const at::Tensor& t : rets[k]) s->rets[k].push_back(tmeta_of(t));
  }
  tl_meta_hint.name = name;
  tl_meta_hint.shapes = std::move(s);
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&tpu_boxed_kernel>());
}

// Ops whose PrivateUse1 kernel would otherwise be a CompositeExplicitAutograd
// decomposition but that libtpurt lowers whole (native_layer_norm decomposes into
// native_batch_norm over a [1, M, N] view; convolution_overrideable's default kernel
// throws; silu_backward / mish_backward's CompositeImplicitAutograd math kernels run as
// 5-6 separate ops, each with a full-size temporary — a UNet step's peak memory was 1.3x
// CPU's; native_group_norm's math_group_norm views a channels_last input as [1, N*G, -1],
// which throws, and runs batch_norm + mul + add with full-size temporaries): the same boxed
// kernel, registered by name.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  for (const char* name : {"native_layer_norm", "convolution_overrideable", "convolution_backward_overrideable",
                           "silu_backward", "mish_backward", "native_group_norm",
                           "_scaled_dot_product_fused_attention_overrideable",
                           "_scaled_dot_product_fused_attention_overrideable_backward"}) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&tpu_boxed_kernel>());
  }
  // _foreach_* list ops that libtpurt lowers whole (lower/foreach.c: one graph per call
  // instead of PyTorch's per-tensor decomposition); the others keep that decomposition.
  for (const c10::OperatorName& op : c10::Dispatcher::singleton().getAllOpNames()) {
    if (op.name.rfind("aten::_foreach_", 0) != 0) continue;
    std::string full = op.overload_name.empty() ? op.name : op.name + "." + op.overload_name;
    if (tpu_op_supported(full.c_str())) {
      m.impl(full.c_str() + 6, torch::CppFunction::makeFromBoxedFunction<&tpu_boxed_kernel>());
    }
  }
}

// Structured functional ops (add.Tensor, mul.Tensor, mm, sigmoid, ...): without a PrivateUse1
// kernel they run PyTorch's generated CompositeExplicitAutogradNonFunctional kernel, which
// builds a TensorIterator (or runs the op's meta function) on every call to size the result
// and then calls the .out overload — ~4,000 instructions of a tiny add's ~14,600. Registered
// here, they reach the boxed kernel directly. The first call with an argument signature (the
// meta cache's key) runs that PyTorch kernel as before (its checks, its error messages) and
// keeps its results' sizes/strides/dtypes; later calls with the same signature allocate
// those and run the .out overload's lowering with them as out= tensors (run_on_device).
// (The op's Meta kernel is not used: for add/mm it is Python, ~1 ms per new signature.)
// Chosen from the dispatcher's table: no written or aliased argument/return, only Tensor
// returns, a CompositeExplicitAutogradNonFunctional kernel, no PrivateUse1 kernel, and an overload of the
// same name whose arguments are these followed by one Tensor(a!) out= per return and that
// libtpurt lowers.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  c10::Dispatcher& d = c10::Dispatcher::singleton();
  std::unordered_map<std::string, std::vector<c10::OperatorName>> by_name;
  const std::vector<c10::OperatorName> all = d.getAllOpNames();
  for (const c10::OperatorName& op : all) {
    if (op.name.rfind("aten::", 0) == 0) by_name[op.name].push_back(op);
  }
  auto full_name = [](const c10::OperatorName& op) {
    return op.overload_name.empty() ? op.name : op.name + "." + op.overload_name;
  };
  for (const c10::OperatorName& op : all) {
    if (op.name.rfind("aten::", 0) != 0 || op.name.rfind("aten::_foreach_", 0) == 0) continue;
    std::optional<c10::OperatorHandle> h = d.findOp(op);
    if (!h || !h->hasSchema()) continue;
    const c10::FunctionSchema& fs = h->schema();
    const auto& fargs = fs.arguments();
    const auto& frets = fs.returns();
    if (frets.empty() || fargs.empty() || fargs[0].real_type()->kind() != c10::TypeKind::TensorType) continue;
    bool ok = true;
    for (const auto& a : fargs) ok &= a.alias_info() == nullptr;
    for (const auto& r : frets) ok &= r.alias_info() == nullptr && r.real_type()->kind() == c10::TypeKind::TensorType;
    if (!ok || tpu_op_supported(full_name(op).c_str()) ||
        !h->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional) ||
        h->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1)) {
      continue;
    }
    for (const c10::OperatorName& cand : by_name[op.name]) {
      std::optional<c10::OperatorHandle> ch = d.findOp(cand);
      if (!ch || !ch->hasSchema()) continue;
      const auto& cargs = ch->schema().arguments();
      if (cargs.size() != fargs.size() + frets.size() || !ch->schema().returns().size()) continue;
      bool match = true;
      for (size_t i = 0; i < fargs.size() && match; ++i) {
        match = cargs[i].name() == fargs[i].name() && cargs[i].real_type()->str() == fargs[i].real_type()->str() &&
                cargs[i].alias_info() == nullptr;
      }
      for (size_t i = fargs.size(); i < cargs.size() && match; ++i) {
        match = cargs[i].is_out() && cargs[i].real_type()->kind() == c10::TypeKind::TensorType;
      }
      const std::string out_name = full_name(cand);
      if (!match || !tpu_op_supported(out_name.c_str())) continue;
      const std::string name = full_name(op);
      via_out_ops().emplace(name, ViaOut{out_name, h->getComputedKernelForDispatchKey(c10::DispatchKey::PrivateUse1)});
      m.impl(name.c_str() + 6, torch::CppFunction::makeFromBoxedFunction<&tpu_boxed_kernel>());
      break;
    }
  }
}

}  // namespace torch_tpu
