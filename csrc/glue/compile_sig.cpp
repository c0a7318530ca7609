// compile_sig.cpp — torch_tpu._C._graph_signature(args): the key torch.compile(backend="tpu") looks its graph
// captures up by (torch_tpu/_compile.py). One pass over a compiled graph's call arguments, without creating
// Python objects per argument: the 140-input AdamW graph of minGPT pays ~25 us here instead of ~245 us of Python
// attribute reads (measured under load, see benchmarks/RESULTS.md).
//
// The signature is a bytes object; two calls get equal bytes exactly when a capture made for one can replay the
// other: for each tensor its dtype, device, sizes and strides, and which earlier argument (if any) shares its
// storage and at which byte offset from it (a capture binds inputs by memory range, so aliasing is baked in); for
// each int, bool, float or None its value. Storage offsets and requires_grad are not part of it (a replay binds each input's data pointer and never
// looks at autograd state). Any other argument kind (or a non-strided tensor) -> None, and the caller falls back
// to its own (slower, Python) key.
#include <pybind11/pybind11.h>

#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/pybind.h>

#include <cstdint>
#include <string>
#include <vector>

#include "glue.h"

namespace py = pybind11;

namespace torch_tpu {
namespace {

template <class T>
void put(std::string& s, T v) {
  s.append(reinterpret_cast<const char*>(&v), sizeof v);
}

py::object graph_signature(py::handle args) {
  PyObject* seq = PySequence_Fast(args.ptr(), "_graph_signature: expected a list or tuple");
  if (!seq) throw py::error_already_set();
  py::object owner = py::reinterpret_steal<py::object>(seq);
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  PyObject** items = PySequence_Fast_ITEMS(seq);
  // per thread, reused: the bytes are built here and copied once into the result (no allocation per call
  // once they have grown to the largest graph's size)
  thread_local std::string s;
  s.clear();
  s.reserve(static_cast<size_t>(n) * 56);
  // storage -> the first argument holding it: open addressing over a power-of-two table at most half full,
  // reused across calls (a node-based map allocated once per tensor: ~140 mallocs per AdamW graph call)
  struct First {
    const void* storage;
    int32_t index;
    int64_t byte_offset;
  };
  thread_local std::vector<First> table;
  size_t cap = 16;
  while (cap < static_cast<size_t>(n) * 2) cap <<= 1;
  table.assign(cap, First{nullptr, 0, 0});
  const size_t mask = cap - 1;
  auto first_of = [&](const void* key, int32_t index, int64_t off) -> const First& {
    size_t h = (reinterpret_cast<uintptr_t>(key) >> 4) * 0x9E3779B97F4A7C15ull >> 20;
    for (;; h = (h + 1) & mask) {
      First& f = table[h & mask];
      if (f.storage == key) return f;
      if (f.storage == nullptr) {
        f = First{key, index, off};
        return f;
      }
    }
  };
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* o = items[i];
    if (THPVariable_Check(o)) {
      const at::Tensor& t = THPVariable_Unpack(o);
      if (!t.defined() || t.layout() != c10::kStrided || t.is_nested()) return py::none();
      const int64_t nd = t.dim();
      s.push_back('T');
      put<int16_t>(s, static_cast<int16_t>(t.scalar_type()));
      put<int16_t>(s, static_cast<int16_t>(t.device().type()));
      put<int16_t>(s, static_cast<int16_t>(t.device().index()));
      put<int16_t>(s, static_cast<int16_t>(nd));
      for (int64_t d = 0; d < nd; ++d) put<int64_t>(s, t.sizes()[d]);
      for (int64_t d = 0; d < nd; ++d) put<int64_t>(s, t.strides()[d]);
      // empty storages have no address to compare
      if (t.has_storage() && t.storage().nbytes() > 0) {
        const int64_t off = t.storage_offset() * static_cast<int64_t>(t.element_size());
        const First& f = first_of(t.storage().unsafeGetStorageImpl(), static_cast<int32_t>(i), off);
        put<int32_t>(s, f.index);
        if (f.index != i) put<int64_t>(s, off - f.byte_offset);  // where it lies relative to that argument
      } else {
        put<int32_t>(s, static_cast<int32_t>(i));
      }
    } else if (o == Py_None) {
      s.push_back('n');
    } else if (PyBool_Check(o)) {
      s.push_back(o == Py_True ? 'B' : 'b');
    } else if (PyLong_CheckExact(o)) {
      int overflow = 0;
      const long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
      if (overflow || (v == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return py::none();
      }
      s.push_back('i');
      put<int64_t>(s, static_cast<int64_t>(v));
    } else if (PyFloat_CheckExact(o)) {
      s.push_back('f');
      put<double>(s, PyFloat_AS_DOUBLE(o));  // by bits: 0.0 and -0.0 differ, as baked-in scalars would
    } else {
      return py::none();
    }
  }
  return py::bytes(s);
}

}  // namespace

void register_compile_bindings(py::module& m) {
  m.def("_graph_signature", [](py::handle args) -> py::object {
    HANDLE_TH_ERRORS { return graph_signature(args); }
    END_HANDLE_TH_ERRORS_PYBIND
  });
}

}  // namespace torch_tpu
