"""How many clusters of the cluster-row softmax the H200 keeps resident at once
(``cuOccupancyMaxActiveClusters``), against how many plain programs of the same kernel fit
(``cuOccupancyMaxActiveBlocksPerMultiprocessor`` x SMs), per cluster size and warps: is
cluster packing what holds rows of 65536 at ~85 us (session 9)? Not yet run."""
import ctypes
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import exp_cls  # noqa: E402

cuda = ctypes.CDLL("libcuda.so.1")
CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4


class Dim(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


class AttrValue(ctypes.Union):
    _fields_ = [("clusterDim", Dim), ("pad", ctypes.c_char * 64)]


class Attr(ctypes.Structure):
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", AttrValue)]


class Config(ctypes.Structure):
    _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p),
                ("attrs", ctypes.POINTER(Attr)), ("numAttrs", ctypes.c_uint)]


if __name__ == "__main__":
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for n, C, R, warps in ((65536, 8, 8192, 8), (65536, 8, 8192, 16), (65536, 4, 8192, 8),
                           (65536, 2, 16384, 16), (262144, 8, 8192, 16), (262144, 16, 8192, 8)):
        x = torch.randn(2**26 // n, n, device="cuda").bfloat16()
        y = torch.empty_like(x)
        part = torch.zeros(x.shape[0] * 16 * 2, device="cuda")
        exp_cls.launcher(x, y, part, n, C, R, warps)  # compiles
        k = exp_cls.softmax_cls.warmup(x, y, part, n, C, n // C, R, grid=(1,), num_warps=warps)
        k._init_handles()
        fn = ctypes.c_void_p(k.function)
        if C == 16:
            cuda.cuFuncSetAttribute(fn, 14, 1)  # CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED
        blocks = ctypes.c_int()
        cuda.cuOccupancyMaxActiveBlocksPerMultiprocessor(ctypes.byref(blocks), fn, 32 * warps,
                                                         ctypes.c_size_t(k.metadata.shared))
        attr = Attr(id=CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION)
        attr.value.clusterDim = Dim(C, 1, 1)
        cfg = Config(x.shape[0] * C, 1, 1, 32 * warps, 1, 1, k.metadata.shared, None,
                     ctypes.pointer(attr), 1)
        clusters = ctypes.c_int()
        rc = cuda.cuOccupancyMaxActiveClusters(ctypes.byref(clusters), fn, ctypes.byref(cfg))
        print(f"N={n} C{C} R{R} w{warps}: plain {blocks.value}/SM = {blocks.value * sms} programs; "
              f"clusters {clusters.value} x {C} = {clusters.value * C} programs (rc {rc})", flush=True)
