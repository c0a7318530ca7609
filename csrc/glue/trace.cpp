// trace.cpp — Python bindings of fused eager and graph capture (libtpurt's tpu_trace_* /
// tpu_capture_* API, see tpurt.h): torch_tpu._C._set_fused_eager, _capture_begin/_capture_end
// and the CaptureHandle that replays a captured trace (one enqueue per run, no per-op work).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>

#include <ATen/EmptyTensor.h>
#include <ATen/ops/empty_strided.h>
#include <c10/core/DeviceGuard.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/pybind.h>

#include "glue.h"

namespace py = pybind11;

namespace torch_tpu {
namespace {

int resolve(int device) {
  if (device < 0) device = current_device();
  check_device_index(device);
  return device;
}

std::vector<tpu_tensor_t> records(const std::vector<at::Tensor>& ts, const char* what) {
  std::vector<tpu_tensor_t> r(ts.size());
  for (size_t i = 0; i < ts.size(); ++i) {
    TORCH_CHECK(ts[i].defined(), what, " ", i, " is undefined");
    TORCH_CHECK(ts[i].device().type() == kTpu, what, " ", i, " must be a tpu tensor, got ", ts[i].device());
    fill_tensor_record(ts[i], &r[i], what);
  }
  return r;
}

// records() into a vector the caller reuses (a replay's records: no allocation once it has grown)
void records_into(const std::vector<at::Tensor>& ts, std::vector<tpu_tensor_t>& r, const char* what) {
  r.resize(ts.size());
  for (size_t i = 0; i < ts.size(); ++i) {
    TORCH_CHECK(ts[i].defined(), what, " ", i, " is undefined");
    TORCH_CHECK(ts[i].device().type() == kTpu, what, " ", i, " must be a tpu tensor, got ", ts[i].device());
    fill_tensor_record(ts[i], &r[i], what);
  }
}

std::vector<int64_t> sizes_of(const tpu_tensor_t& m) { return std::vector<int64_t>(m.sizes, m.sizes + m.ndim); }
std::vector<int64_t> strides_of(const tpu_tensor_t& m) { return std::vector<int64_t>(m.strides, m.strides + m.ndim); }

// Whether `owned` (a reference this code holds) is the only way to reach its tensor: no other C++
// reference, and its Python wrapper, if any, is kept alive only by the tensor itself (a wrapper
// holds one reference and, while others exist, the tensor holds the wrapper; see PyTorch's note
// "PyObject preservation for Tensor and Storages"). The caller holds the GIL.
// `copies`: how many references to it this code holds (a graph may take one tensor twice: a
// value and its detached alias, which a replay returns as one tensor).
bool sole_owner(const at::Tensor& owned, size_t copies) {
  PyObject* py = owned.unsafeGetTensorImpl()->pyobj_slot()->load_pyobj();
  if (py == nullptr) return owned.use_count() == copies;
  return owned.use_count() == copies + 1 && Py_REFCNT(py) == 1;
}

// A replayable captured trace. Keeps the constants alive (their memory is bound into it).
class CaptureHandle {
 public:
  CaptureHandle(tpu_capture_t* c, int device, std::vector<at::Tensor> constants)
      : c_(c), device_(device), constants_(std::move(constants)) {}
  ~CaptureHandle() { tpu_capture_free(c_); }
  CaptureHandle(const CaptureHandle&) = delete;
  CaptureHandle& operator=(const CaptureHandle&) = delete;

  // donate: the caller handed over its references (the list was cleared); an input no one else
  // holds (one tensor on its storage, this vector its only owner) is freed right after the run's
  // last step reading it and the buffers written after that step are allocated only then, as op by
  // op execution frees and allocates (the peak of a captured backward is otherwise every saved
  // activation plus every gradient). The allocator hold keeps those blocks from other threads
  // until the run is enqueued.
  std::vector<at::Tensor> run(std::vector<at::Tensor> inputs, bool donate) {
    // records: per thread, reused (a replay binds 30-140 inputs and 0-60 buffers of 216 bytes each)
    thread_local std::vector<tpu_tensor_t> in, rec;
    records_into(inputs, in, "captured graph input");
    if (!layouts_ready_) load_layouts();
    const int nb = static_cast<int>(bufs_.size());
    std::vector<at::Tensor> bufs(static_cast<size_t>(nb));
    rec.resize(static_cast<size_t>(nb));
    // Straight to the allocator (no dispatcher round trip per buffer): a replay's buffers are the same
    // empty_strided PyTorch's factory would make on this device.
    c10::DeviceGuard guard(c10::Device(kTpu, static_cast<c10::DeviceIndex>(device_)));
    const auto ks = c10::DispatchKeySet(c10::DispatchKey::PrivateUse1);
    auto alloc = [&](int b) {
      const BufLayout& l = bufs_[static_cast<size_t>(b)];
      bufs[b] = at::detail::empty_strided_generic(l.sizes, l.strides, tpu_allocator(), ks, l.dtype);
      fill_tensor_record(bufs[b], &rec[b], "captured graph output");
    };
    // donated inputs that die before the last buffer's writer: indices into don_groups_, by last read
    thread_local std::vector<int> dead;
    dead.clear();
    if (donate && nb > 0 && !tpu_trace_recording(device_) &&
        (don_ready_ ? don_inputs_ == inputs.size() : plan_donation(inputs, in))) {
      for (size_t g = 0; g < don_groups_.size(); ++g) {
        const DonGroup& d = don_groups_[g];
        const at::Tensor& t = inputs[static_cast<size_t>(d.input)];
        const c10::Storage& s = t.storage();
        // one Storage handle: every input on it is this tensor (each TensorImpl holds one), so the group's size
        // is its count; a group of another storage (a direct run() aliasing otherwise) is not donated
        if (s.use_count() != 1 || s.nbytes() == 0 || s.data_ptr().get() == nullptr) continue;
        bool same = true;
        for (int32_t k = d.begin; k < d.end && same; ++k)
          same = inputs[static_cast<size_t>(don_members_[static_cast<size_t>(k)])].storage().unsafeGetStorageImpl() ==
                 s.unsafeGetStorageImpl();
        if (same && sole_owner(t, static_cast<size_t>(d.end - d.begin) + 1)) dead.push_back(static_cast<int>(g));
      }
    }
    tpu_status_t st;
    if (dead.empty()) {
      for (int b = 0; b < nb; ++b) alloc(b);
      py::gil_scoped_release no_gil;
      st = tpu_capture_run(c_, in.data(), static_cast<int>(in.size()), rec.data(), nb);
    } else {
      check_status(tpu_rt_alloc_hold_begin(device_));
      struct Hold {
        int d;
        ~Hold() { tpu_rt_alloc_hold_end(d); }
      } hold{device_};
      size_t j = 0;
      for (int b : buf_order_) {
        for (; j < dead.size(); ++j) {  // free: its last reader runs before b's writer
          const DonGroup& d = don_groups_[static_cast<size_t>(dead[j])];
          if (d.last >= life_first_[static_cast<size_t>(b)]) break;
          c10::StorageImpl* s = inputs[static_cast<size_t>(d.input)].storage().unsafeGetStorageImpl();
          c10::DataPtr gone = s->set_data_ptr(c10::DataPtr(nullptr, s->device()));
          s->set_nbytes(0);
        }
        alloc(b);
      }
      py::gil_scoped_release no_gil;
      st = tpu_capture_run(c_, in.data(), static_cast<int>(in.size()), rec.data(), nb);
    }
    check_status(st);
    const size_t n = outs_.size();
    std::vector<at::Tensor> outs(n);
    for (size_t k = 0; k < n; ++k) {
      const OutLayout& o = outs_[k];
      const at::Tensor& base = o.input >= 0 ? inputs.at(static_cast<size_t>(o.input)) : bufs.at(static_cast<size_t>(o.buffer));
      if (o.off == 0 && base.sizes().equals(o.sizes) && base.strides().equals(o.strides)) {
        outs[k] = base;
        continue;
      }
      // Another tensor on the base's storage, not an autograd view of it (what inductor's outputs are,
      // torch._C._dynamo.guards._reinterpret_tensor): AOTAutograd detaches every output that is a view
      // before saving it, and an autograd as_strided costs a view record; a graph output has no autograd
      // history to share with its base anyway (AOTAutograd regenerates aliases of inputs itself).
      at::Tensor alias = at::detail::make_tensor<c10::TensorImpl>(c10::Storage(base.storage()), base.key_set(), base.dtype());
      alias.unsafeGetTensorImpl()->set_sizes_and_strides(o.sizes, o.strides, base.storage_offset() + o.off);
      outs[k] = std::move(alias);
    }
    return outs;
  }
  at::TensorOptions options(const tpu_tensor_t& m) const {
    static const c10::ScalarType kTypes[] = {c10::kFloat, c10::kDouble, c10::kHalf, c10::kBFloat16, c10::kLong,
                                             c10::kInt,   c10::kShort,  c10::kChar, c10::kByte,     c10::kBool};
    TORCH_CHECK(m.dtype >= 0 && m.dtype < TPU_DTYPE_COUNT, "captured graph: bad output dtype");
    return at::TensorOptions().dtype(kTypes[m.dtype]).device(c10::Device(kTpu, device_));
  }
  // What call() returns (set once by torch_tpu/_compile.py's _Replay): the graph's outputs as a list, a tuple or
  // the single value; each output is the run's tensor k, a Python value, or a new tensor without elements.
  enum OutKind { kOutTensor, kOutValue, kOutEmpty };
  struct OutSpec {
    OutKind kind;
    int k;                // kOutTensor: index into run()'s outputs
    py::object value;     // kOutValue
    std::vector<int64_t> sizes, strides;  // kOutEmpty
    at::TensorOptions opts;
  };
  void set_plan(py::handle specs, int out_type) {
    TORCH_CHECK(out_type >= 0 && out_type <= 2, "set_plan: out_type must be 0 (single), 1 (list) or 2 (tuple)");
    std::vector<OutSpec> plan;
    if (!specs.is_none()) {
      for (py::handle e : specs) {
        auto kv = e.cast<py::tuple>();
        const std::string kind = kv[0].cast<std::string>();
        OutSpec o{kOutTensor, -1, py::none(), {}, {}, {}};
        if (kind == "h") {
          o.k = kv[1].cast<int>();
          TORCH_CHECK(o.k >= 0 && o.k < tpu_capture_num_outputs(c_), "set_plan: output ", o.k, " out of range");
        } else if (kind == "value") {
          o.kind = kOutValue;
          o.value = py::reinterpret_borrow<py::object>(kv[1]);
        } else {
          TORCH_CHECK(kind == "empty", "set_plan: unknown output kind ", kind);
          auto v = kv[1].cast<py::tuple>();
          o.kind = kOutEmpty;
          o.sizes = v[0].cast<std::vector<int64_t>>();
          o.strides = v[1].cast<std::vector<int64_t>>();
          o.opts = at::TensorOptions().dtype(v[2].cast<at::ScalarType>()).device(v[3].cast<at::Device>());
        }
        plan.push_back(std::move(o));
      }
    } else {
      for (int k = 0; k < tpu_capture_num_outputs(c_); ++k) plan.push_back(OutSpec{kOutTensor, k, py::none(), {}, {}, {}});
    }
    TORCH_CHECK(out_type != 0 || plan.size() == 1, "set_plan: a single output needs exactly one spec");
    plan_ = std::move(plan);
    out_type_ = out_type;
    plan_ready_ = true;
  }
  // AOTAutograd's boxed call of a replay: takes the tensors among `args` (a list, cleared: its references are
  // handed over, so inputs nobody else holds are freed inside the run, see run()), runs, and returns the
  // graph's outputs as set_plan says: one C++ pass instead of Python filtering the arguments and assembling
  // the outputs.
  py::object call(py::handle args) {
    TORCH_CHECK(plan_ready_, "CaptureHandle.call: set_plan was not called");
    TORCH_CHECK(PyList_CheckExact(args.ptr()), "CaptureHandle.call: expected a list");
    PyObject* lst = args.ptr();
    const Py_ssize_t n = PyList_GET_SIZE(lst);
    std::vector<at::Tensor> ts;
    ts.reserve(static_cast<size_t>(n));
    for (Py_ssize_t i = 0; i < n; ++i) {
      PyObject* o = PyList_GET_ITEM(lst, i);
      if (THPVariable_Check(o)) ts.push_back(THPVariable_Unpack(o));
    }
    if (PyList_SetSlice(lst, 0, n, nullptr) != 0) throw py::error_already_set();
    std::vector<at::Tensor> got = run(std::move(ts), true);
    auto item = [&](const OutSpec& o) -> PyObject* {
      if (o.kind == kOutTensor) return THPVariable_Wrap(got[static_cast<size_t>(o.k)]);  // (a copy: k may repeat)
      if (o.kind == kOutValue) return o.value.inc_ref().ptr();
      return THPVariable_Wrap(at::empty_strided(o.sizes, o.strides, o.opts));
    };
    if (out_type_ == 0) {
      PyObject* r = item(plan_[0]);
      if (!r) throw py::error_already_set();
      return py::reinterpret_steal<py::object>(r);
    }
    const Py_ssize_t m = static_cast<Py_ssize_t>(plan_.size());
    py::object out = py::reinterpret_steal<py::object>(out_type_ == 1 ? PyList_New(m) : PyTuple_New(m));
    if (!out) throw py::error_already_set();
    for (Py_ssize_t j = 0; j < m; ++j) {
      PyObject* r = item(plan_[static_cast<size_t>(j)]);
      if (!r) throw py::error_already_set();
      if (out_type_ == 1) PyList_SET_ITEM(out.ptr(), j, r);
      else PyTuple_SET_ITEM(out.ptr(), j, r);
    }
    return out;
  }
  int num_ops() const { return tpu_capture_num_ops(c_); }
  const tpu_capture_t* raw() const { return c_; }
  void drop_graph() { tpu_capture_drop_graph(c_); }
  int num_outputs() const { return tpu_capture_num_outputs(c_); }

 private:
  tpu_capture_t* c_;
  int device_;
  std::vector<at::Tensor> constants_;
  // What a donating run needs that is fixed per capture (plan_donation, at the first donating run): the
  // buffers' first writers (tpu_capture_lifetimes); the inputs grouped by storage, as the graph
  // signature (compile_sig.cpp) fixes them: one group per storage whose last reader (the latest of its inputs')
  // runs before the last buffer's first writer, by last reader, each the first input on that storage plus the
  // others in don_members_[begin, end); the buffers by first writer.
  struct DonGroup {
    int32_t input, last, begin, end;
  };
  std::vector<int32_t> life_first_;
  std::vector<DonGroup> don_groups_;
  std::vector<int32_t> don_members_;
  std::vector<int> buf_order_;
  size_t don_inputs_ = 0;  // the input count the plan is for
  bool don_ready_ = false;
  // Makes the donation plan from these inputs (records `in`); false, nothing made, when the capture would not run
  // them (then the run fails; this also keeps tpu_capture_lifetimes from writing past a short input vector).
  bool plan_donation(const std::vector<at::Tensor>& inputs, const std::vector<tpu_tensor_t>& in) {
    const int n = static_cast<int>(inputs.size()), nb = tpu_capture_num_buffers(c_);
    if (!tpu_capture_inputs_match(c_, in.data(), n)) return false;
    std::vector<int32_t> last(static_cast<size_t>(n)), first(static_cast<size_t>(nb));
    check_status(tpu_capture_lifetimes(c_, last.data(), first.data()));
    const int32_t latest = nb > 0 ? *std::max_element(first.begin(), first.end()) : -1;
    std::vector<std::pair<const void*, int>> by_storage(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) by_storage[i] = {inputs[i].storage().unsafeGetStorageImpl(), i};
    std::sort(by_storage.begin(), by_storage.end());
    std::vector<DonGroup> groups;
    std::vector<int32_t> members;
    for (size_t g = 0; g < by_storage.size();) {
      size_t e = g + 1;
      while (e < by_storage.size() && by_storage[e].first == by_storage[g].first) ++e;
      DonGroup d{by_storage[g].second, last[by_storage[g].second], static_cast<int32_t>(members.size()), 0};
      for (size_t k = g + 1; k < e; ++k) {
        members.push_back(by_storage[k].second);
        d.last = std::max(d.last, last[by_storage[k].second]);
      }
      d.end = static_cast<int32_t>(members.size());
      if (d.last < latest) groups.push_back(d);
      g = e;
    }
    std::sort(groups.begin(), groups.end(), [](const DonGroup& a, const DonGroup& b) {
      return a.last < b.last || (a.last == b.last && a.input < b.input);
    });
    std::vector<int> order(static_cast<size_t>(nb));
    for (int b = 0; b < nb; ++b) order[b] = b;
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return first[a] < first[b]; });
    life_first_ = std::move(first);
    don_groups_ = std::move(groups);
    don_members_ = std::move(members);
    buf_order_ = std::move(order);
    don_inputs_ = inputs.size();
    don_ready_ = true;
    return true;
  }
  std::vector<OutSpec> plan_;  // set_plan
  int out_type_ = 1;
  bool plan_ready_ = false;
  // what tpu_capture_buffer_info / tpu_capture_output_info return, read once (they never change)
  struct BufLayout {
    std::vector<int64_t> sizes, strides;
    c10::ScalarType dtype;
  };
  struct OutLayout {
    std::vector<int64_t> sizes, strides;
    int input, buffer;
    int64_t off;
  };
  std::vector<BufLayout> bufs_;
  std::vector<OutLayout> outs_;
  bool layouts_ready_ = false;
  void load_layouts() {
    const int nb = tpu_capture_num_buffers(c_), n = tpu_capture_num_outputs(c_);
    std::vector<BufLayout> bl(static_cast<size_t>(nb));
    std::vector<OutLayout> ol(static_cast<size_t>(n));
    for (int b = 0; b < nb; ++b) {
      tpu_tensor_t meta;
      check_status(tpu_capture_buffer_info(c_, b, &meta));
      bl[b] = BufLayout{sizes_of(meta), strides_of(meta), c10::typeMetaToScalarType(options(meta).dtype())};
    }
    for (int k = 0; k < n; ++k) {
      tpu_tensor_t meta;
      OutLayout& o = ol[k];
      check_status(tpu_capture_output_info(c_, k, &meta, &o.input, &o.buffer, &o.off));
      o.sizes = sizes_of(meta);
      o.strides = strides_of(meta);
      TORCH_CHECK(o.input >= 0 || (o.buffer >= 0 && o.buffer < nb), "captured graph: output ", k, " has no base");
    }
    bufs_ = std::move(bl);
    outs_ = std::move(ol);
    layouts_ready_ = true;
  }
};

int g_capture_device = -1;  // the device of the last _capture_begin (default for _capture_end)

// A size template (tpu_capture_size_check): owned by the graph segment that checks its captures.
class SizeTemplate {
 public:
  SizeTemplate() = default;
  ~SizeTemplate() { tpu_size_template_free(t_); }
  SizeTemplate(const SizeTemplate&) = delete;
  SizeTemplate& operator=(const SizeTemplate&) = delete;
  tpu_size_template_t** ptr() { return &t_; }
  const tpu_size_template_t* get() const { return t_; }
  std::string text() const {
    std::string s(tpu_size_template_print(t_, nullptr, 0), '\0');
    tpu_size_template_print(t_, s.data(), s.size());
    s.resize(s.size() ? s.size() - 1 : 0);
    return s;
  }

 private:
  tpu_size_template_t* t_ = nullptr;
};

}  // namespace

void register_trace_bindings(py::module& m) {
  m.def("_set_fused_eager", [](bool enabled) {
    HANDLE_TH_ERRORS {
      runtime_init_or_throw();
      tpu_status_t st;
      {
        py::gil_scoped_release no_gil;
        st = tpu_trace_set_enabled(enabled);
      }
      check_status(st);
    }
    END_HANDLE_TH_ERRORS_PYBIND
  });
  m.def("_fused_eager_enabled", []() -> bool {
    HANDLE_TH_ERRORS {
      runtime_init_or_throw();
      return tpu_trace_enabled();
    }
    END_HANDLE_TH_ERRORS_PYBIND
  });
  m.def("_trace_flush", [](int device) {
    HANDLE_TH_ERRORS {
      device = resolve(device);
      tpu_status_t st;
      {
        py::gil_scoped_release no_gil;
        st = tpu_trace_flush(device);
      }
      check_status(st);
    }
    END_HANDLE_TH_ERRORS_PYBIND
  });
  m.def("_trace_stats", []() -> py::dict {
    HANDLE_TH_ERRORS {
      tpu_trace_stats_t s{};
      tpu_trace_stats_get(&s);
      py::dict d;
      d["trace_flushes"] = s.flushes;
      d["traced_ops"] = s.traced_ops;
      d["trace_cache_hits"] = s.cache_hits;
      d["trace_cache_misses"] = s.cache_misses;
      d["trace_fallbacks"] = s.fallbacks;
      return d;
    }
    END_HANDLE_TH_ERRORS_PYBIND
  });
  m.def("_trace_stats_reset", []() {
    HANDLE_TH_ERRORS { tpu_trace_stats_reset(); }
    END_HANDLE_TH_ERRORS_PYBIND
  });
  m.def("_capture_begin", [](int device) {
    HANDLE_TH_ERRORS {
      device = resolve(device);
      tpu_status_t st;
      {
        py::gil_scoped_release no_gil;
        st = tpu_capture_begin(device);
      }
      check_status(st);
      g_capture_device = device;
    }
    END_HANDLE_TH_ERRORS_PYBIND
  });
  py::class_<CaptureHandle>(m, "CaptureHandle")
      .def(
          "run",
          [](CaptureHandle& h, py::list inputs, bool donate) -> std::vector<at::Tensor> {
            HANDLE_TH_ERRORS {
              std::vector<at::Tensor> ts = inputs.cast<std::vector<at::Tensor>>();
              // donate: the list's references are handed over (AOTAutograd's boxed convention)
              if (donate && PyList_SetSlice(inputs.ptr(), 0, PyList_GET_SIZE(inputs.ptr()), nullptr) != 0)
                throw py::error_already_set();
              return h.run(std::move(ts), donate);
            }
            END_HANDLE_TH_ERRORS_PYBIND
          },
          py::arg("inputs"), py::arg("donate") = false)
      .def("set_plan",
           [](CaptureHandle& h, py::handle specs, int out_type) {
             HANDLE_TH_ERRORS { h.set_plan(specs, out_type); }
             END_HANDLE_TH_ERRORS_PYBIND
           },
           py::arg("specs"), py::arg("out_type"))
      .def("call",
           [](CaptureHandle& h, py::handle args) -> py::object {
             HANDLE_TH_ERRORS { return h.call(args); }
             END_HANDLE_TH_ERRORS_PYBIND
           },
           py::arg("args"))
      .def("drop_graph", &CaptureHandle::drop_graph)
      .def("inputs_match",
           [](const CaptureHandle& h, const std::vector<at::Tensor>& inputs) -> bool {
             HANDLE_TH_ERRORS {
               std::vector<tpu_tensor_t> in = records(inputs, "captured graph input");
               return tpu_capture_inputs_match(h.raw(), in.data(), static_cast<int>(in.size())) != 0;
             }
             END_HANDLE_TH_ERRORS_PYBIND
           })
      .def_property_readonly("num_ops", &CaptureHandle::num_ops)
      .def_property_readonly("num_outputs", &CaptureHandle::num_outputs);
  m.def(
      "_capture_end",
      [](const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs,
         const std::vector<at::Tensor>& constants, int device, bool keep_graph) -> py::tuple {
        HANDLE_TH_ERRORS {
          device = resolve(device < 0 && g_capture_device >= 0 ? g_capture_device : device);
          std::vector<tpu_tensor_t> in = records(inputs, "capture input");
          std::vector<tpu_tensor_t> out = records(outputs, "capture output");
          std::vector<tpu_tensor_t> cst = records(constants, "capture constant");
          tpu_capture_t* c = nullptr;
          char reason[512];
          tpu_status_t st;
          {
            py::gil_scoped_release no_gil;
            st = tpu_capture_end_ex(device, in.data(), static_cast<int>(in.size()), cst.data(),
                                    static_cast<int>(cst.size()), out.data(), static_cast<int>(out.size()),
                                    keep_graph ? TPU_CAPTURE_KEEP_GRAPH : 0u, &c, reason, sizeof reason);
          }
          check_status(st);
          if (!c) return py::make_tuple(py::none(), std::string(reason));
          auto* h = new CaptureHandle(c, device, constants);
          return py::make_tuple(py::cast(h, py::return_value_policy::take_ownership), std::string());
        }
        END_HANDLE_TH_ERRORS_PYBIND
      },
      py::arg("inputs"), py::arg("outputs"), py::arg("constants") = std::vector<at::Tensor>{},
      py::arg("device") = -1, py::arg("keep_graph") = false);
  py::class_<SizeTemplate>(m, "SizeTemplate")
      .def(py::init<>())
      .def("__str__", &SizeTemplate::text);
  // (verdict, reason): is the capture (made with keep_graph) an instance of the template at these sizes, with
  // `extra` (the caller's integers) size fields too (see tpurt.h)
  m.def(
      "_capture_size_check",
      [](SizeTemplate& t, const CaptureHandle& h, const std::vector<int64_t>& sizes, const std::vector<int64_t>& extra) {
        HANDLE_TH_ERRORS {
          int verdict = 0;
          char reason[512];
          check_status(tpu_capture_size_check(t.ptr(), h.raw(), sizes.data(), static_cast<int>(sizes.size()),
                                              extra.data(), static_cast<int>(extra.size()), &verdict, reason,
                                              sizeof reason));
          static const char* const kNames[] = {"not_instance", "predicted", "generalized", "first"};
          return py::make_tuple(std::string(kNames[verdict & 3]), std::string(reason));
        }
        END_HANDLE_TH_ERRORS_PYBIND
      },
      py::arg("template"), py::arg("handle"), py::arg("sizes"), py::arg("extra") = std::vector<int64_t>{});
  // (handle or None, extra integers at these sizes, reason): a capture made from the template (tpurt.h
  // tpu_capture_instantiate), never recorded
  m.def(
      "_capture_instantiate",
      [](const SizeTemplate& t, const std::vector<int64_t>& sizes, int n_extra, int device, bool keep_graph) -> py::tuple {
        HANDLE_TH_ERRORS {
          device = resolve(device);
          TORCH_CHECK(t.get() != nullptr, "size template: no capture checked yet");
          TORCH_CHECK(n_extra >= 0, "n_extra must be >= 0");
          std::vector<int64_t> extra(static_cast<size_t>(n_extra));
          tpu_capture_t* c = nullptr;
          char reason[512];
          tpu_status_t st;
          {
            py::gil_scoped_release no_gil;
            st = tpu_capture_instantiate(t.get(), device, sizes.data(), static_cast<int>(sizes.size()),
                                         keep_graph ? TPU_CAPTURE_KEEP_GRAPH : 0u, extra.data(), n_extra, &c, reason,
                                         sizeof reason);
          }
          check_status(st);
          if (!c) return py::make_tuple(py::none(), py::list(), std::string(reason));
          auto* h = new CaptureHandle(c, device, {});
          return py::make_tuple(py::cast(h, py::return_value_policy::take_ownership), extra, std::string());
        }
        END_HANDLE_TH_ERRORS_PYBIND
      },
      py::arg("template"), py::arg("sizes"), py::arg("n_extra"), py::arg("device") = -1, py::arg("keep_graph") = false);
  // _meta_hint(name, rets): set_meta_hint (glue.h); rets: per return a list of tensors (fake/meta ones are fine)
  m.def("_meta_hint", [](const std::string& name, const std::vector<std::vector<at::Tensor>>& rets) {
    set_meta_hint(name, rets);
  });
  m.def("_meta_hints_used", []() { return meta_hints_used(); });
  // (same, reason): two captures with kept graphs have the same graph and bindings
  m.def("_capture_same", [](const CaptureHandle& a, const CaptureHandle& b) {
    HANDLE_TH_ERRORS {
      char reason[512];
      int same = tpu_capture_same(a.raw(), b.raw(), reason, sizeof reason);
      return py::make_tuple(same != 0, std::string(reason));
    }
    END_HANDLE_TH_ERRORS_PYBIND
  });
}

}  // namespace torch_tpu
