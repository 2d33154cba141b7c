"""The C++ source of the launcher's native allocator (:mod:`.native_alloc`, decision 0510).

A CPython extension over ATen's ``EmptyTensor.h`` (no pybind11, no torch Python headers:
it compiles in about 1.5 s). ``empty_strided(sizes, strides, dtype=, device=)`` takes
the call the generated launcher writes and allocates through
``at::detail::empty_strided_cpu`` (``empty_strided_cuda`` where torch has CUDA and the
extension is built with ``TORCHSTRATA_CUDA``), then wraps the tensor with torch's own
``THPVariable_Wrap``: no Python argument parser, no dispatcher.

It takes exactly ``torch.empty_strided``'s path (calls it with the same arguments) for
anything else: other arguments than two tuples of exact ints and the two keywords, a
dtype or device object it does not know, a device other than the CPU or an indexed CUDA
device, the first call with a device object (which also runs torch's lazy device set-up),
an active torch function mode, an active dispatch mode or any dispatch key included in
this thread beyond the defaults (a dispatch mode, vmap, functionalization, the tracer),
deterministic algorithms with uninitialised memory filled, and any C++ exception (so
errors read as torch's). ``torch_calls()`` counts the calls that took torch's path.

Dtypes are never read from torch's C structs: ``samples()`` returns an empty tensor of
each scalar type it can make (``(code, tensor)``; not ``complex32``, whose allocation
warns once a process, nor the quantized types), Python reads each tensor's ``dtype``,
and ``init`` registers the ``torch.dtype`` objects with their codes. A device object is
resolved once by its ``type`` and ``index`` attributes and remembered by identity (a
strong reference, so the address is never reused; 32 at most, others take torch's path).
"""

from __future__ import annotations

#: Bumped whenever the source changes in a way its cache key would not see.
SOURCE_VERSION = "empty-strided-2"

SOURCE = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <ATen/Context.h>
#include <ATen/EmptyTensor.h>
#include <ATen/PythonTorchFunctionTLS.h>
#include <c10/core/ScalarType.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <c10/util/SmallVector.h>
#ifdef TORCHSTRATA_CUDA
#include <ATen/cuda/EmptyTensor.h>
#endif

#include <cstdint>

// Exported by libtorch_python (torch/csrc/autograd/python_variable.h); declared here so
// that the extension needs none of torch's Python headers.
PyObject* THPVariable_Wrap(const at::TensorBase& var);

namespace {

PyObject* torch_empty_strided = nullptr;  // torch.empty_strided: every other call
PyObject* device_class = nullptr;  // torch.device
PyObject* dtype_keyword = nullptr;  // "dtype", interned
PyObject* device_keyword = nullptr;  // "device", interned
uint64_t torch_call_count = 0;

struct DtypeEntry {
  PyObject* dtype;  // a torch.dtype (torch keeps one object per dtype)
  c10::ScalarType scalar_type;
};
constexpr int kMaxDtypes = 64;
DtypeEntry dtypes[kMaxDtypes];
int dtype_count = 0;

enum class Place : char { kCpu, kCuda, kTorch };
struct DeviceEntry {
  PyObject* device;  // a torch.device, held
  Place place;
  c10::DeviceIndex index;
};
constexpr int kMaxDevices = 32;
DeviceEntry devices[kMaxDevices];
int device_count = 0;

using Ints = c10::SmallVector<int64_t, 8>;

PyObject* torch_path(PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  torch_call_count++;
  if (torch_empty_strided == nullptr) {
    PyErr_SetString(PyExc_RuntimeError, "init() was not called");
    return nullptr;
  }
  return PyObject_Vectorcall(torch_empty_strided, args, nargs, kwnames);
}

// Whether torch's allocation could differ from at::detail's here: a torch function
// mode, a dispatch mode or any key this thread includes beyond the defaults, or
// deterministic algorithms that fill uninitialised memory.
bool unusual() {
  if (at::impl::torch_function_mode_enabled()) {
    return true;
  }
  if (!(c10::impl::tls_local_dispatch_key_set().included_ - c10::default_included_set).empty()) {
    return true;
  }
  if (c10::impl::TorchDispatchModeTLS::any_modes_set()) {
    return true;
  }
  const at::Context& context = at::globalContext();
  return context.deterministicAlgorithms() && context.deterministicFillUninitializedMemory();
}

bool read_ints(PyObject* tuple, Ints& out) {
  if (!PyTuple_CheckExact(tuple)) {
    return false;
  }
  Py_ssize_t count = PyTuple_GET_SIZE(tuple);
  out.resize(count);
  for (Py_ssize_t i = 0; i < count; i++) {
    PyObject* item = PyTuple_GET_ITEM(tuple, i);
    if (!PyLong_CheckExact(item)) {
      return false;
    }
    int overflow = 0;
    long long value = PyLong_AsLongLongAndOverflow(item, &overflow);
    if (overflow != 0 || (value == -1 && PyErr_Occurred())) {
      PyErr_Clear();
      return false;
    }
    out[i] = value;
  }
  return true;
}

bool same_name(PyObject* name, PyObject* interned) {
  return name == interned || PyUnicode_Compare(name, interned) == 0;
}

const DtypeEntry* find_dtype(PyObject* dtype) {
  for (int i = 0; i < dtype_count; i++) {
    if (dtypes[i].dtype == dtype) {
      return &dtypes[i];
    }
  }
  return nullptr;
}

const DeviceEntry* find_device(PyObject* device) {
  for (int i = 0; i < device_count; i++) {
    if (devices[i].device == device) {
      return &devices[i];
    }
  }
  return nullptr;
}

// Resolves a torch.device by its ``type`` and ``index`` and remembers it (its first call
// takes torch's path anyway).
void remember_device(PyObject* device) {
  if (device_count == kMaxDevices || Py_TYPE(device) != reinterpret_cast<PyTypeObject*>(device_class)) {
    return;
  }
  Place place = Place::kTorch;
  c10::DeviceIndex index = -1;
  PyObject* type = PyObject_GetAttrString(device, "type");
  PyObject* number = PyObject_GetAttrString(device, "index");
  if (type != nullptr && number != nullptr && PyUnicode_Check(type)) {
    if (PyUnicode_CompareWithASCIIString(type, "cpu") == 0) {
      place = Place::kCpu;
    }
#ifdef TORCHSTRATA_CUDA
    if (PyUnicode_CompareWithASCIIString(type, "cuda") == 0 && PyLong_CheckExact(number)) {
      long value = PyLong_AsLong(number);
      if (value >= 0 && value < 64) {
        place = Place::kCuda;
        index = static_cast<c10::DeviceIndex>(value);
      }
    }
#endif
  }
  Py_XDECREF(type);
  Py_XDECREF(number);
  PyErr_Clear();
  Py_INCREF(device);
  devices[device_count++] = DeviceEntry{device, place, index};
}

PyObject* empty_strided(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  if (nargs != 2 || kwnames == nullptr || PyTuple_GET_SIZE(kwnames) != 2 || unusual()) {
    return torch_path(args, nargs, kwnames);
  }
  PyObject* dtype = nullptr;
  PyObject* device = nullptr;
  for (Py_ssize_t i = 0; i < 2; i++) {
    PyObject* name = PyTuple_GET_ITEM(kwnames, i);
    if (same_name(name, dtype_keyword)) {
      dtype = args[2 + i];
    } else if (same_name(name, device_keyword)) {
      device = args[2 + i];
    }
  }
  if (PyErr_Occurred()) {  // a keyword that is no str: torch's path says so
    PyErr_Clear();
    return torch_path(args, nargs, kwnames);
  }
  const DtypeEntry* found_dtype = dtype != nullptr ? find_dtype(dtype) : nullptr;
  if (found_dtype == nullptr || device == nullptr) {
    return torch_path(args, nargs, kwnames);
  }
  const DeviceEntry* found_device = find_device(device);
  if (found_device == nullptr) {
    remember_device(device);
    return torch_path(args, nargs, kwnames);
  }
  Ints sizes;
  Ints strides;
  if (found_device->place == Place::kTorch || !read_ints(args[0], sizes) ||
      !read_ints(args[1], strides) || sizes.size() != strides.size()) {
    return torch_path(args, nargs, kwnames);
  }
  try {
    at::TensorBase tensor;
#ifdef TORCHSTRATA_CUDA
    if (found_device->place == Place::kCuda) {
      tensor = at::detail::empty_strided_cuda(
          sizes, strides, found_dtype->scalar_type,
          c10::Device(c10::DeviceType::CUDA, found_device->index));
    } else
#endif
    {
      tensor = at::detail::empty_strided_cpu(sizes, strides, found_dtype->scalar_type);
    }
    PyObject* wrapped = THPVariable_Wrap(tensor);
    if (wrapped != nullptr) {
      return wrapped;
    }
  } catch (...) {
  }
  PyErr_Clear();
  return torch_path(args, nargs, kwnames);
}

// ``[(code, tensor)]``: an empty CPU tensor of each scalar type that can be made, for
// Python to read the ``torch.dtype`` of each code from.
PyObject* samples(PyObject*, PyObject*) {
  PyObject* list = PyList_New(0);
  if (list == nullptr) {
    return nullptr;
  }
  for (int code = 0; code < static_cast<int>(c10::ScalarType::NumOptions); code++) {
    auto scalar_type = static_cast<c10::ScalarType>(code);
    // ComplexHalf: its allocation warns once a process that it is experimental, a
    // warning no process should get from this; torch's path allocates it
    if (scalar_type == c10::ScalarType::Undefined || c10::isQIntType(scalar_type) ||
        scalar_type == c10::ScalarType::ComplexHalf) {
      continue;
    }
    PyObject* tensor = nullptr;
    try {
      int64_t zero = 0;
      int64_t one = 1;
      tensor = THPVariable_Wrap(at::detail::empty_strided_cpu({zero}, {one}, scalar_type));
    } catch (...) {
      tensor = nullptr;
    }
    if (tensor == nullptr) {
      PyErr_Clear();
      continue;
    }
    PyObject* pair = Py_BuildValue("(iN)", code, tensor);
    if (pair == nullptr || PyList_Append(list, pair) < 0) {
      Py_XDECREF(pair);
      Py_DECREF(list);
      return nullptr;
    }
    Py_DECREF(pair);
  }
  return list;
}

// ``init(torch.empty_strided, torch.device, ((dtype, code), ...))``: what every other
// call takes, the device class, and the dtypes known (looked up in this order).
PyObject* init(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 3 || !PyCallable_Check(args[0]) || !PyType_Check(args[1]) || !PyTuple_Check(args[2])) {
    PyErr_SetString(PyExc_TypeError, "init(torch.empty_strided, torch.device, pairs)");
    return nullptr;
  }
  PyObject* pairs = args[2];
  Py_ssize_t count = PyTuple_GET_SIZE(pairs);
  if (count > kMaxDtypes) {
    PyErr_SetString(PyExc_ValueError, "too many dtypes");
    return nullptr;
  }
  DtypeEntry read[kMaxDtypes];
  for (Py_ssize_t i = 0; i < count; i++) {
    PyObject* pair = PyTuple_GET_ITEM(pairs, i);
    if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
      PyErr_SetString(PyExc_TypeError, "a pair is (dtype, code)");
      return nullptr;
    }
    long code = PyLong_AsLong(PyTuple_GET_ITEM(pair, 1));
    if (code == -1 && PyErr_Occurred()) {
      return nullptr;
    }
    if (code < 0 || code >= static_cast<long>(c10::ScalarType::NumOptions)) {
      PyErr_SetString(PyExc_ValueError, "not a scalar type");
      return nullptr;
    }
    read[i] = DtypeEntry{PyTuple_GET_ITEM(pair, 0), static_cast<c10::ScalarType>(code)};
  }
  for (int i = 0; i < dtype_count; i++) {
    Py_DECREF(dtypes[i].dtype);
  }
  for (Py_ssize_t i = 0; i < count; i++) {
    Py_INCREF(read[i].dtype);
    dtypes[i] = read[i];
  }
  dtype_count = static_cast<int>(count);
  for (int i = 0; i < device_count; i++) {
    Py_DECREF(devices[i].device);
  }
  device_count = 0;
  Py_INCREF(args[0]);
  Py_XSETREF(torch_empty_strided, args[0]);
  Py_INCREF(args[1]);
  Py_XSETREF(device_class, args[1]);
  Py_RETURN_NONE;
}

PyObject* registered(PyObject*, PyObject*) {
  PyObject* tuple = PyTuple_New(dtype_count);
  if (tuple == nullptr) {
    return nullptr;
  }
  for (int i = 0; i < dtype_count; i++) {
    Py_INCREF(dtypes[i].dtype);
    PyTuple_SET_ITEM(tuple, i, dtypes[i].dtype);
  }
  return tuple;
}

PyObject* torch_calls(PyObject*, PyObject*) {
  return PyLong_FromUnsignedLongLong(torch_call_count);
}

PyObject* has_cuda(PyObject*, PyObject*) {
#ifdef TORCHSTRATA_CUDA
  Py_RETURN_TRUE;
#else
  Py_RETURN_FALSE;
#endif
}

PyMethodDef methods[] = {
    {"empty_strided", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(empty_strided)),
     METH_FASTCALL | METH_KEYWORDS,
     "empty_strided(sizes, strides, dtype=, device=): torch.empty_strided's tensor."},
    {"samples", samples, METH_NOARGS, "[(code, empty tensor of that scalar type)]"},
    {"init", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(init)), METH_FASTCALL,
     "init(torch.empty_strided, torch.device, ((dtype, code), ...))"},
    {"dtypes", registered, METH_NOARGS, "The dtypes allocated natively, in lookup order."},
    {"torch_calls", torch_calls, METH_NOARGS, "How many calls took torch's path."},
    {"has_cuda", has_cuda, METH_NOARGS, "Whether CUDA devices are allocated natively."},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "torchstrata_empty_strided", nullptr, -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit_torchstrata_empty_strided(void) {
  dtype_keyword = PyUnicode_InternFromString("dtype");
  device_keyword = PyUnicode_InternFromString("device");
  if (dtype_keyword == nullptr || device_keyword == nullptr) {
    return nullptr;
  }
  return PyModule_Create(&module);
}
"""
