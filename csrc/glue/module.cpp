// module.cpp — the pybind11 module torch_tpu._C. Every function catches everything
// (HANDLE_TH_ERRORS) so that C++ exceptions become Python exceptions and nothing
// reachable from Python can abort the process.
#include <pybind11/pybind11.h>

#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/Generator.h>
#include <torch/csrc/utils/device_lazy_init.h>
#include <torch/csrc/utils/pybind.h>

#include "glue.h"

// Internal libtpurt symbol (csrc/tpurt/common/common.h); not in the public header.
extern "C" const char* tpu_cpu_features_string(void);

namespace py = pybind11;

namespace torch_tpu {
void register_trace_bindings(py::module& m);  // trace.cpp
void register_compile_bindings(py::module& m);  // compile_sig.cpp
}

namespace torch_tpu {
namespace {

int resolve_device(int device) {
  if (device < 0) device = current_device();
  check_device_index(device);
  return device;
}

void init() {
  runtime_init_or_throw();
  torch::utils::register_fork_handler_for_device_init(kTpu);
}

// Exit-time drain of the autograd engine's tpu threads (torch_tpu/__init__.py registers it with atexit). A
// backward's GraphTask is released by whichever thread drops it last: often the device thread, just after the caller
// has been woken. If the interpreter is finalizing by then, releasing its Python objects (the contextvars context
// torch stashes per backward, returned gradients) makes the thread take the GIL, Python ends the thread with a forced
// unwind through a noexcept destructor and the process aborts ("terminate called without an active exception").
// A device thread runs its tasks in order and drops each GraphTask before taking the next task, so one tiny backward
// per device, built here from C++ tensors (no Python objects to release), returns only after those threads have let
// go of every earlier GraphTask. Errors are swallowed: this runs at exit. Returns whether it ran.
bool drain_autograd_threads() {
  if (!guard_set_device_seen() || !runtime_ok()) return false;
  const c10::DeviceIndex n = device_count();
  py::gil_scoped_release no_gil;  // the engine must not be entered holding the GIL
  for (c10::DeviceIndex i = 0; i < n; ++i) {
    try {
      // empty tensors and a view: the backward's nodes (ViewBackward, AccumulateGrad) run on the device thread but
      // compute nothing, so the drain compiles and caches nothing (tests/test_cache.py counts both across processes)
      const auto opts = at::TensorOptions().dtype(at::kFloat).device(c10::Device(kTpu, i));
      at::Tensor x = at::empty({0}, opts).requires_grad_(true);
      torch::autograd::backward({x.view({0, 1})}, {at::empty({0, 1}, opts)});
    } catch (const std::exception&) {
    }
  }
  return true;
}

py::dict memory_stats(int device) {
  device = resolve_device(device);
  tpu_rt_memory_stats_t s{};
  check_status(tpu_rt_memory_stats(device, &s));
  py::dict d;
  d["allocated_bytes"] = s.allocated_bytes;
  d["max_allocated_bytes"] = s.max_allocated_bytes;
  d["reserved_bytes"] = s.reserved_bytes;
  d["max_reserved_bytes"] = s.max_reserved_bytes;
  d["requested_bytes"] = s.requested_bytes;
  d["capacity_bytes"] = s.capacity_bytes;
  d["num_allocs"] = s.num_allocs;
  d["num_frees"] = s.num_frees;
  d["num_cache_hits"] = s.num_cache_hits;
  d["num_ooms"] = s.num_ooms;
  d["scratch_bytes"] = s.scratch_bytes;
  d["max_scratch_bytes"] = s.max_scratch_bytes;
  d["scratch_cached_bytes"] = s.scratch_cached_bytes;
  return d;
}

py::dict metrics() {
  tpu_metrics_t mt{};
  tpu_metrics_get(&mt);
  py::dict d;
  d["ops_run"] = mt.ops_run;
  d["exec_cache_hits"] = mt.exec_cache_hits;
  d["exec_cache_misses"] = mt.exec_cache_misses;
  d["compiles"] = mt.compiles;
  d["exec_cache_entries"] = mt.exec_cache_entries;
  d["compile_seconds"] = mt.compile_seconds;
  d["kernels_launched"] = mt.kernels_launched;
  d["group_steps"] = mt.group_steps;
  d["graph_ops_before"] = mt.graph_ops_before;
  d["graph_ops_after"] = mt.graph_ops_after;
  d["pass_canon_rewrites"] = mt.pass_canon_rewrites;
  d["pass_folds"] = mt.pass_folds;
  d["pass_cse_hits"] = mt.pass_cse_hits;
  d["pass_dce_removed"] = mt.pass_dce_removed;
  d["fusion_clusters"] = mt.fusion_clusters;
  d["fusion_ops_fused"] = mt.fusion_ops_fused;
  d["fusion_reduce_producers"] = mt.fusion_reduce_producers;
  d["host_waits"] = mt.host_waits;
  d["fallback_ops"] = fallback_total();
  tpu_cache_stats_t cs{};
  tpu_cache_stats_get(&cs);  // the compilation cache's levels (tpurt.h)
  d["cache_hits_memory"] = mt.exec_cache_hits;
  d["cache_hits_disk"] = cs.disk_hits;
  d["cache_disk_misses"] = cs.disk_misses;
  d["cache_disk_writes"] = cs.disk_writes;
  d["cache_disk_rejected"] = cs.disk_rejected;
  d["cache_disk_evictions"] = cs.disk_evictions;
  d["cache_disk_errors"] = cs.disk_errors;
  d["cache_disk_load_seconds"] = cs.disk_load_seconds;
  d["cache_disk_store_seconds"] = cs.disk_store_seconds;
  return d;
}

py::dict cache_stats() {
  tpu_cache_stats_t cs{};
  tpu_cache_stats_get(&cs);
  py::dict d;
  d["disk_enabled"] = static_cast<bool>(cs.disk_enabled);
  d["memory_entries"] = cs.memory_entries;
  d["disk_hits"] = cs.disk_hits;
  d["disk_misses"] = cs.disk_misses;
  d["disk_writes"] = cs.disk_writes;
  d["disk_rejected"] = cs.disk_rejected;
  d["disk_evictions"] = cs.disk_evictions;
  d["disk_errors"] = cs.disk_errors;
  d["disk_bytes"] = cs.disk_bytes;
  d["disk_max_bytes"] = cs.disk_max_bytes;
  d["disk_load_seconds"] = cs.disk_load_seconds;
  d["disk_store_seconds"] = cs.disk_store_seconds;
  return d;
}

// benchmarks/common.py's near / far tag: the probe's record, or None where it cannot measure (one CPU, no
// affinity permission, a CPU too busy to answer in time).
py::object core_distance() {
  tpu_rt_cpu_distance_t d{};
  tpu_status_t st;
  {
    py::gil_scoped_release no_gil;
    st = tpu_rt_cpu_distance_probe(&d);
  }
  if (st) {
    tpu_status_free(st);
    return py::none();
  }
  py::dict r;
  r["rtt_ns"] = d.rtt_ns;
  r["rtt_p10_ns"] = d.rtt_p10_ns;
  r["rtt_cycles"] = d.rtt_cycles;
  r["cpus"] = py::make_tuple(d.cpu_a, d.cpu_b);
  r["trips"] = d.trips;
  return r;
}

py::dict counts() {
  py::dict d;
  for (const auto& [name, n] : fallback_counts()) d[py::str(name)] = n;
  return d;
}

}  // namespace
}  // namespace torch_tpu

// Wraps a function body so that every C++ exception becomes a Python exception.
#define TPU_PY(body)           \
  HANDLE_TH_ERRORS { body; }   \
  END_HANDLE_TH_ERRORS_PYBIND

// Debug recording of executed graphs (tests/test_stablehlo.py): StableHLO text + input/output copies.
static py::list debug_take_graphs() {
  static const char* const kDt[] = {"float32", "float64", "float16", "bfloat16", "int64",
                                    "int32", "int16", "int8", "uint8", "bool"};
  static const char* const kRole[] = {"params", "scalars", "outputs"};
  py::list out;
  while (tpu_debug_graph_t* r = tpu_debug_take_graph()) {
    py::dict d;
    d["op"] = std::string(r->op_name);
    d["text"] = r->text ? py::object(py::str(r->text)) : py::object(py::none());
    d["error"] = r->error ? py::object(py::str(r->error)) : py::object(py::none());
    py::list lists[3];
    for (int k = 0; k < r->n_arrays; ++k) {
      const tpu_debug_array_t& a = r->arrays[k];
      py::list shape;
      for (int i = 0; i < a.rank; ++i) shape.append(a.dims[i]);
      py::object data = a.data ? py::object(py::bytes(static_cast<const char*>(a.data), a.nbytes))
                               : py::object(py::none());
      lists[a.role].append(py::make_tuple(kDt[a.dtype], py::tuple(shape), data));
    }
    for (int k = 0; k < 3; ++k) d[kRole[k]] = lists[k];
    tpu_debug_graph_free(r);
    out.append(d);
  }
  return out;
}

PYBIND11_MODULE(_C, m) {
  using namespace torch_tpu;
  m.doc() = "torch_tpu._C: PrivateUse1 glue between PyTorch and libtpurt";
  register_trace_bindings(m);
  register_compile_bindings(m);

  m.def("_init", []() { TPU_PY(init()) });
  m.def("_device_count", []() -> int { TPU_PY(return device_count()) });
  m.def("_get_device", []() -> int { TPU_PY(return current_device()) });
  m.def("_set_device", [](int device) { TPU_PY(set_current_device(static_cast<c10::DeviceIndex>(device))) });
  m.def("_synchronize", [](int device) {
    TPU_PY({
      device = resolve_device(device);
      tpu_status_t st;
      {
        py::gil_scoped_release no_gil;
        st = tpu_rt_synchronize(device);
      }
      check_status(st);
    })
  });
  m.def("_memory_stats", [](int device) -> py::dict { TPU_PY(return memory_stats(device)) });
  m.def("_reset_peak_memory_stats", [](int device) {
    TPU_PY(check_status(tpu_rt_reset_peak_memory_stats(resolve_device(device))))
  });
  m.def("_empty_cache", [](int device) {
    TPU_PY({
      device = resolve_device(device);
      tpu_status_t st;
      {
        py::gil_scoped_release no_gil;
        st = tpu_rt_empty_cache(device);
      }
      check_status(st);
    })
  });
  m.def("_metrics", []() -> py::dict { TPU_PY(return metrics()) });
  m.def("_metrics_reset", []() {
    TPU_PY({
      tpu_metrics_reset();
      tpu_cache_stats_reset();
      fallback_reset();
    })
  });
  m.def("_fallback_counts", []() -> py::dict { TPU_PY(return counts()) });
  m.def("_set_cpu_fallback", [](bool enabled) { TPU_PY(set_cpu_fallback(enabled)) });
  m.def("_get_cpu_fallback", []() -> bool { TPU_PY(return cpu_fallback_enabled()) });
  m.def("_launch_blocking", []() -> bool { TPU_PY(runtime_init_or_throw(); return tpu_rt_launch_blocking()) });
  m.def("_num_threads", []() -> int { TPU_PY(runtime_init_or_throw(); return tpu_rt_num_threads()) });
  m.def("_cpu_features", []() -> std::string { TPU_PY(return std::string(tpu_cpu_features_string())) });
  m.def("_core_distance", []() -> py::object { TPU_PY(return core_distance()) });
  m.def("_get_default_generator", [](int device) -> py::object {
    TPU_PY({
      const at::Generator& gen = default_generator(static_cast<c10::DeviceIndex>(device));
      PyObject* obj = THPGenerator_initDefaultGenerator(gen);
      if (obj == nullptr) throw py::error_already_set();
      return py::reinterpret_steal<py::object>(obj);
    })
  });
  // Compilation cache (torch_tpu.cache).
  m.def("_cache_init", []() { TPU_PY(check_status(tpu_cache_init())) });
  m.def("_cache_stats", []() -> py::dict { TPU_PY(return cache_stats()) });
  m.def("_cache_clear", []() {
    TPU_PY({
      tpu_status_t st;
      {
        py::gil_scoped_release no_gil;
        st = tpu_cache_clear();
      }
      check_status(st);
    })
  });
  m.def("_cache_dir", []() -> std::string { TPU_PY(return std::string(tpu_cache_dir())) });
  m.def("_cache_take_warning", []() -> py::object {
    TPU_PY({
      const char* w = tpu_cache_take_warning();
      return w ? py::object(py::str(w)) : py::object(py::none());
    })
  });
  m.def("_op_supported", [](const std::string& name) -> bool { TPU_PY(return tpu_op_supported(name.c_str())) });
  m.def("_debug_record_graphs", [](bool enable) { TPU_PY(tpu_debug_record_graphs(enable)) });
  m.def("_debug_take_graphs", []() -> py::list { TPU_PY(return debug_take_graphs()) });
  // Not in the original list: lets torch.tpu implement _is_in_bad_fork (the host
  // runtime's threads do not survive fork()).
  m.def("_is_in_bad_fork", []() -> bool { TPU_PY(return torch::utils::is_device_in_bad_fork(kTpu)) });
  m.def("_drain_autograd_threads", []() -> bool { TPU_PY(return drain_autograd_threads()) });
}
