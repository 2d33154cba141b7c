"""The C++ source of the native tensor check (:mod:`torchstrata.runtime.native_guards`).

A CPython extension over c10's ``TensorImpl`` header and three small ATen headers (no
pybind11, no operators: it compiles in about three seconds). It defines ``TensorCheck``:
built from a guard's expected metadata, called with one object, it answers what the
generated Python condition of a tensor guard answers
(:func:`torchstrata.core.guard_conditions`): the exact Python type among the allowed
ones, then sizes, strides, dtype, device, ``requires_grad`` and the lazy negative /
conjugate bits (sizes and strides not for a symbolic entry's tensor, whose size check
reads them), read from the tensor's ``TensorImpl`` directly instead of through seven
Python getters. A second type, ``LastLayout``, holds a symbolic entry's last routed
layout (each tensor's sizes and strides) with its route: called with the entry's
tensors, it returns that route when their layout is the same, else None, in place of the
generated check reading ``.shape`` and ``.stride()`` of each tensor and comparing them
in Python (decision 0475). ``state_key``/``same_state`` read the global state of
:func:`torchstrata.core.global_state` as one number, where it is the common one (no
autocast, no torch function or dispatch mode), for a global-state guard (decision 0515).

The tensor is found the way torch's own ``THPVariable_Unpack`` finds it: a ``Tensor``
(or ``Parameter``) object holds its ``at::Tensor`` (one ``TensorImpl`` pointer) right
after the object header. ``probe`` reads that pointer so the loader can compare it with
``tensor._cdata`` before trusting the layout; an object of any other type is never read.
Any C++ exception (a tensor without strides, sizes that are symbolic) fails the check.
"""

from __future__ import annotations

#: Bumped whenever the source changes in a way its cache key would not see.
SOURCE_VERSION = "tensor-check-5"

SOURCE = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/PythonTorchFunctionTLS.h>
#include <c10/core/DefaultDtype.h>
#include <c10/core/GradMode.h>
#include <c10/core/InferenceMode.h>
#include <c10/core/TensorImpl.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>

#include <cstddef>
#include <cstdint>
#include <new>
#include <type_traits>

namespace {

PyObject* tensor_type = nullptr;  // torch.Tensor, given to ``init``

// The at::Tensor of a torch.Tensor object sits right after its header.
constexpr Py_ssize_t kTensorOffset = sizeof(PyObject);

inline c10::TensorImpl* impl_of(PyObject* object) {
  return *reinterpret_cast<c10::TensorImpl**>(reinterpret_cast<char*>(object) + kTensorOffset);
}

struct TensorCheck {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  PyObject* types;  // tuple of the exact types allowed
  caffe2::TypeMeta dtype;
  c10::Device device;
  bool any_index;  // a CPU tensor: the type of device alone, as ``is_cpu`` reads it
  bool requires_grad;
  bool no_neg;
  bool no_conj;
  Py_ssize_t rank;  // -1: sizes and strides are not checked (a symbolic entry's tensor)
  int64_t* layout;  // the sizes, then the strides (PyMem_Malloc'd)
};

bool same(c10::IntArrayRef actual, const int64_t* expected, Py_ssize_t rank) {
  if (actual.size() != static_cast<size_t>(rank)) {
    return false;
  }
  for (Py_ssize_t i = 0; i < rank; i++) {
    if (actual[i] != expected[i]) {
      return false;
    }
  }
  return true;
}

bool matches(TensorCheck* self, PyObject* object) {
  PyTypeObject* type = Py_TYPE(object);
  Py_ssize_t count = PyTuple_GET_SIZE(self->types);
  bool allowed = false;
  for (Py_ssize_t i = 0; i < count; i++) {
    if (reinterpret_cast<PyObject*>(type) == PyTuple_GET_ITEM(self->types, i)) {
      allowed = true;
      break;
    }
  }
  if (!allowed) {
    return false;
  }
  try {
    c10::TensorImpl* impl = impl_of(object);
    if (impl->dtype() != self->dtype) {
      return false;
    }
    if (self->rank >= 0 && (!same(impl->sizes(), self->layout, self->rank) ||
                            !same(impl->strides(), self->layout + self->rank, self->rank))) {
      return false;
    }
    c10::Device device = impl->device();
    if (device.type() != self->device.type() ||
        (!self->any_index && device.index() != self->device.index())) {
      return false;
    }
    if (impl->requires_grad() != self->requires_grad) {
      return false;
    }
    return !(self->no_neg && impl->is_neg()) && !(self->no_conj && impl->is_conj());
  } catch (...) {
    return false;
  }
}

PyObject* check_call(PyObject* callable, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  if (PyVectorcall_NARGS(nargsf) != 1 || kwnames != nullptr) {
    PyErr_SetString(PyExc_TypeError, "TensorCheck takes one positional argument");
    return nullptr;
  }
  PyObject* result = matches(reinterpret_cast<TensorCheck*>(callable), args[0]) ? Py_True : Py_False;
  Py_INCREF(result);
  return result;
}

// ``count`` ints of the tuple ``items`` into ``out``.
bool read_ints(PyObject* items, Py_ssize_t count, int64_t* out) {
  if (!PyTuple_Check(items) || PyTuple_GET_SIZE(items) != count) {
    PyErr_SetString(PyExc_ValueError, "TensorCheck: sizes and strides are tuples of one length");
    return false;
  }
  for (Py_ssize_t i = 0; i < count; i++) {
    long long value = PyLong_AsLongLong(PyTuple_GET_ITEM(items, i));
    if (value == -1 && PyErr_Occurred()) {
      return false;
    }
    out[i] = static_cast<int64_t>(value);
  }
  return true;
}

bool is_tensor_object(PyObject* object);

// TensorCheck(types, like, requires_grad, sizes, strides, no_neg, no_conj, any_index):
// ``like`` is a tensor of the expected dtype and device; ``sizes`` None: neither sizes
// nor strides are checked.
PyObject* check_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  PyObject *types, *like, *sizes, *strides;
  int requires_grad, no_neg, no_conj, any_index;
  if (!PyArg_ParseTuple(args, "O!OpOOppp", &PyTuple_Type, &types, &like, &requires_grad, &sizes,
                        &strides, &no_neg, &no_conj, &any_index)) {
    return nullptr;
  }
  if (!is_tensor_object(like) || (sizes != Py_None && !PyTuple_Check(sizes))) {
    PyErr_SetString(PyExc_TypeError, "TensorCheck: like must be a torch.Tensor, sizes a tuple");
    return nullptr;
  }
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(types); i++) {  // only tensors are read
    PyObject* item = PyTuple_GET_ITEM(types, i);
    if (!PyType_Check(item) || !PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(item),
                                                 reinterpret_cast<PyTypeObject*>(tensor_type))) {
      PyErr_SetString(PyExc_TypeError, "TensorCheck: types must be torch.Tensor types");
      return nullptr;
    }
  }
  TensorCheck* self = reinterpret_cast<TensorCheck*>(type->tp_alloc(type, 0));
  if (self == nullptr) {
    return nullptr;
  }
  new (&self->dtype) caffe2::TypeMeta();
  new (&self->device) c10::Device(c10::DeviceType::CPU);
  self->vectorcall = check_call;
  Py_INCREF(types);
  self->types = types;
  self->requires_grad = requires_grad != 0;
  self->no_neg = no_neg != 0;
  self->no_conj = no_conj != 0;
  self->any_index = any_index != 0;
  try {
    c10::TensorImpl* impl = impl_of(like);
    self->dtype = impl->dtype();
    self->device = impl->device();
  } catch (...) {
    Py_DECREF(self);
    PyErr_SetString(PyExc_ValueError, "TensorCheck: like has no dtype or device");
    return nullptr;
  }
  if (sizes == Py_None) {
    self->rank = -1;
    return reinterpret_cast<PyObject*>(self);
  }
  self->rank = PyTuple_GET_SIZE(sizes);
  self->layout = static_cast<int64_t*>(PyMem_Malloc(sizeof(int64_t) * (2 * self->rank + 1)));
  if (self->layout == nullptr) {
    Py_DECREF(self);
    return PyErr_NoMemory();
  }
  if (!read_ints(sizes, self->rank, self->layout) ||
      !read_ints(strides, self->rank, self->layout + self->rank)) {
    Py_DECREF(self);
    return nullptr;
  }
  return reinterpret_cast<PyObject*>(self);
}

void check_dealloc(PyObject* object) {
  TensorCheck* self = reinterpret_cast<TensorCheck*>(object);
  Py_XDECREF(self->types);
  PyMem_Free(self->layout);
  Py_TYPE(object)->tp_free(object);
}

PyTypeObject TensorCheckType = {PyVarObject_HEAD_INIT(nullptr, 0)};

// A symbolic entry's last routed layout: the sizes and strides of each of its tensors and
// the route remembered with them. ``last(t0, t1, ...)`` is that route when every tensor
// has those sizes and strides, else None (nothing remembered, another count, a value
// that is not a tensor, a C++ exception); ``last.remember(route, t0, t1, ...)`` replaces
// both. Under the GIL a call sees one layout with its own route.
struct LastLayout {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  PyObject* route;  // nullptr: nothing remembered
  Py_ssize_t count;  // tensors
  PyObject* traits;  // nullptr, or per tensor a TensorCheck (or None) that must hold too
  Py_ssize_t capacity;  // int64s in ``layout``
  int64_t* layout;  // per tensor: its rank, its sizes, its strides (PyMem_Malloc'd)
};

bool same_layout(const int64_t* stored, c10::TensorImpl* impl, Py_ssize_t* used) {
  c10::IntArrayRef sizes = impl->sizes();
  c10::IntArrayRef strides = impl->strides();
  Py_ssize_t rank = static_cast<Py_ssize_t>(sizes.size());
  if (stored[0] != rank || !same(sizes, stored + 1, rank) ||
      !same(strides, stored + 1 + rank, rank)) {
    return false;
  }
  *used = 1 + 2 * rank;
  return true;
}

PyObject* last_call(PyObject* callable, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  LastLayout* self = reinterpret_cast<LastLayout*>(callable);
  Py_ssize_t count = PyVectorcall_NARGS(nargsf);
  if (self->route == nullptr || count != self->count || kwnames != nullptr) {
    Py_RETURN_NONE;
  }
  try {
    Py_ssize_t offset = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
      Py_ssize_t used = 0;
      if (!is_tensor_object(args[i]) ||
          !same_layout(self->layout + offset, impl_of(args[i]), &used)) {
        Py_RETURN_NONE;
      }
      PyObject* trait = self->traits == nullptr ? Py_None : PyTuple_GET_ITEM(self->traits, i);
      if (trait != Py_None && !matches(reinterpret_cast<TensorCheck*>(trait), args[i])) {
        Py_RETURN_NONE;
      }
      offset += used;
    }
  } catch (...) {
    Py_RETURN_NONE;
  }
  Py_INCREF(self->route);
  return self->route;
}

// remember(route, t0, t1, ...): the tensors' sizes and strides and ``route``, remembered.
PyObject* last_remember(PyObject* object, PyObject* const* args, Py_ssize_t nargs) {
  LastLayout* self = reinterpret_cast<LastLayout*>(object);
  if (nargs != self->count + 1) {
    PyErr_SetString(PyExc_TypeError, "remember takes the route and each tensor");
    return nullptr;
  }
  Py_ssize_t total = 0;
  for (Py_ssize_t i = 1; i < nargs; i++) {
    if (!is_tensor_object(args[i])) {
      PyErr_SetString(PyExc_TypeError, "remember takes tensors");
      return nullptr;
    }
  }
  Py_CLEAR(self->route);  // forgotten until the new layout is in place
  try {
    for (Py_ssize_t i = 1; i < nargs; i++) {
      total += 1 + 2 * static_cast<Py_ssize_t>(impl_of(args[i])->sizes().size());
    }
    if (total > self->capacity) {
      int64_t* grown = static_cast<int64_t*>(PyMem_Realloc(self->layout, sizeof(int64_t) * total));
      if (grown == nullptr) {
        return PyErr_NoMemory();
      }
      self->layout = grown;
      self->capacity = total;
    }
    int64_t* out = self->layout;
    for (Py_ssize_t i = 1; i < nargs; i++) {
      c10::TensorImpl* impl = impl_of(args[i]);
      c10::IntArrayRef sizes = impl->sizes();
      c10::IntArrayRef strides = impl->strides();
      *out++ = static_cast<int64_t>(sizes.size());
      for (int64_t size : sizes) {
        *out++ = size;
      }
      for (int64_t stride : strides) {
        *out++ = stride;
      }
    }
  } catch (...) {
    Py_RETURN_NONE;  // nothing remembered: the next call takes the slow path
  }
  Py_INCREF(args[0]);
  self->route = args[0];
  Py_RETURN_NONE;
}

// LastLayout(count[, traits]): nothing remembered yet. ``traits``: a tuple of a
// TensorCheck or None per tensor, each checked with the layout (one call for both).
PyObject* last_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  Py_ssize_t count;
  PyObject* traits = nullptr;
  if (!PyArg_ParseTuple(args, "n|O", &count, &traits)) {
    return nullptr;
  }
  if (count < 0) {
    PyErr_SetString(PyExc_ValueError, "LastLayout: a count of tensors");
    return nullptr;
  }
  if (traits == Py_None) {
    traits = nullptr;
  }
  if (traits != nullptr) {
    if (!PyTuple_Check(traits) || PyTuple_GET_SIZE(traits) != count) {
      PyErr_SetString(PyExc_ValueError, "LastLayout: a TensorCheck or None per tensor");
      return nullptr;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
      PyObject* item = PyTuple_GET_ITEM(traits, i);
      if (item != Py_None && !PyObject_TypeCheck(item, &TensorCheckType)) {
        PyErr_SetString(PyExc_TypeError, "LastLayout: traits are TensorChecks or None");
        return nullptr;
      }
    }
  }
  LastLayout* self = reinterpret_cast<LastLayout*>(type->tp_alloc(type, 0));
  if (self == nullptr) {
    return nullptr;
  }
  self->vectorcall = last_call;
  self->count = count;
  Py_XINCREF(traits);
  self->traits = traits;
  return reinterpret_cast<PyObject*>(self);
}

void last_dealloc(PyObject* object) {
  LastLayout* self = reinterpret_cast<LastLayout*>(object);
  Py_XDECREF(self->route);
  Py_XDECREF(self->traits);
  PyMem_Free(self->layout);
  Py_TYPE(object)->tp_free(object);
}

PyMethodDef last_methods[] = {
    {"remember", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(last_remember)),
     METH_FASTCALL, "remember(route, *tensors): their sizes and strides and the route."},
    {nullptr, nullptr, 0, nullptr},
};

PyTypeObject LastLayoutType = {PyVarObject_HEAD_INIT(nullptr, 0)};

bool is_tensor_object(PyObject* object) {
  return tensor_type != nullptr && PyObject_TypeCheck(object, reinterpret_cast<PyTypeObject*>(tensor_type));
}

// init(torch.Tensor): the base type every object read as a tensor must have.
PyObject* init(PyObject*, PyObject* type) {
  if (!PyType_Check(type)) {
    PyErr_SetString(PyExc_TypeError, "init takes torch.Tensor");
    return nullptr;
  }
  Py_INCREF(type);
  Py_XSETREF(tensor_type, type);
  Py_RETURN_NONE;
}

// probe(tensor): the TensorImpl pointer read where this module reads it (``_cdata``).
PyObject* probe(PyObject*, PyObject* object) {
  if (!is_tensor_object(object)) {
    PyErr_SetString(PyExc_TypeError, "probe takes a torch.Tensor");
    return nullptr;
  }
  return PyLong_FromVoidPtr(impl_of(object));
}

// The global state guard_state.global_state() reads, as one number, when it is the
// common one: no autocast, no torch function mode, no dispatch mode (-1 otherwise: the
// Python snapshot compares it). Every other item is a bit or a small field of the number.
long long state_number() {
  if (!(c10::autocast_dispatch_keyset - c10::impl::tls_local_dispatch_key_set().excluded_).empty() ||
      at::impl::torch_function_mode_enabled() || c10::impl::TorchDispatchModeTLS::stack_len() > 0) {
    return -1;
  }
  const auto& context = at::globalContext();
  return static_cast<long long>(c10::GradMode::is_enabled()) |
         static_cast<long long>(c10::InferenceMode::is_enabled()) << 1 |
         static_cast<long long>(context.deterministicAlgorithms()) << 2 |
         static_cast<long long>(context.deterministicAlgorithmsWarnOnly()) << 3 |
         static_cast<long long>(context.deterministicFillUninitializedMemory()) << 4 |
         static_cast<long long>(static_cast<uint8_t>(c10::get_default_dtype_as_scalartype())) << 8 |
         static_cast<long long>(at::get_num_threads()) << 16;
}

// state_key(): the state's number now (-1: not the common state).
PyObject* state_key(PyObject*, PyObject*) {
  return PyLong_FromLongLong(state_number());
}

// same_state(key): whether the state's number now is ``key`` (one of state_key's, not -1).
PyObject* same_state(PyObject*, PyObject* key) {
  long long expected = PyLong_AsLongLong(key);
  if (expected == -1 && PyErr_Occurred()) {
    return nullptr;
  }
  if (state_number() == expected) {
    Py_RETURN_TRUE;
  }
  Py_RETURN_FALSE;
}

PyMethodDef methods[] = {
    {"init", init, METH_O, "init(torch.Tensor)"},
    {"state_key", state_key, METH_NOARGS, "The global state's number (-1: uncommon state)."},
    {"same_state", same_state, METH_O, "same_state(key): the state's number is key."},
    {"probe", probe, METH_O, "The TensorImpl address read from a tensor object."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "torchstrata_tensor_checks", nullptr, -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit_torchstrata_tensor_checks(void) {
  TensorCheckType.tp_name = "torchstrata_tensor_checks.TensorCheck";
  TensorCheckType.tp_basicsize = sizeof(TensorCheck);
  TensorCheckType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL;
  TensorCheckType.tp_vectorcall_offset = offsetof(TensorCheck, vectorcall);
  static_assert(std::is_standard_layout_v<TensorCheck>, "offsetof needs a standard layout");
  TensorCheckType.tp_call = PyVectorcall_Call;
  TensorCheckType.tp_new = check_new;
  TensorCheckType.tp_dealloc = check_dealloc;
  TensorCheckType.tp_doc = "A static tensor guard: call with one object, True when it matches.";
  if (PyType_Ready(&TensorCheckType) < 0) {
    return nullptr;
  }
  LastLayoutType.tp_name = "torchstrata_tensor_checks.LastLayout";
  LastLayoutType.tp_basicsize = sizeof(LastLayout);
  LastLayoutType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL;
  LastLayoutType.tp_vectorcall_offset = offsetof(LastLayout, vectorcall);
  static_assert(std::is_standard_layout_v<LastLayout>, "offsetof needs a standard layout");
  LastLayoutType.tp_call = PyVectorcall_Call;
  LastLayoutType.tp_new = last_new;
  LastLayoutType.tp_dealloc = last_dealloc;
  LastLayoutType.tp_methods = last_methods;
  LastLayoutType.tp_doc = "A symbolic entry's last routed layout: call with its tensors.";
  if (PyType_Ready(&LastLayoutType) < 0) {
    return nullptr;
  }
  PyObject* m = PyModule_Create(&module);
  if (m == nullptr) {
    return nullptr;
  }
  Py_INCREF(&TensorCheckType);
  if (PyModule_AddObject(m, "TensorCheck", reinterpret_cast<PyObject*>(&TensorCheckType)) < 0) {
    Py_DECREF(&TensorCheckType);
    Py_DECREF(m);
    return nullptr;
  }
  Py_INCREF(&LastLayoutType);
  if (PyModule_AddObject(m, "LastLayout", reinterpret_cast<PyObject*>(&LastLayoutType)) < 0) {
    Py_DECREF(&LastLayoutType);
    Py_DECREF(m);
    return nullptr;
  }
  return m;
}
"""
