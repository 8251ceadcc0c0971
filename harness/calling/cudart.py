"""libcudart through cffi (ABI mode): device queries, memory, events, streams, errors.

This is the harness's own view of the GPU, independent of any program's library. It is what the
timing loop uses for events and the L2 flush, and what tests compare device_info against.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import cffi
import numpy as np

from harness.base import errors as _errors
from harness.base.context import raise_for_code
from harness.base.errors import CudalabError, ToolMissing
from harness.compile import toolchain

_CDEF = """
typedef int cudaError_t;
typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;
const char *cudaGetErrorName(cudaError_t error);
const char *cudaGetErrorString(cudaError_t error);
cudaError_t cudaGetLastError(void);
cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaDeviceGetAttribute(int *value, int attr, int device);
cudaError_t cudaGetDeviceProperties(void *prop, int device);
cudaError_t cudaDriverGetVersion(int *v);
cudaError_t cudaRuntimeGetVersion(int *v);
cudaError_t cudaMemGetInfo(size_t *free, size_t *total);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaMalloc(void **ptr, size_t size);
cudaError_t cudaFree(void *ptr);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, int kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, int kind, cudaStream_t stream);
cudaError_t cudaMemset(void *ptr, int value, size_t count);
cudaError_t cudaMemsetAsync(void *ptr, int value, size_t count, cudaStream_t stream);
cudaError_t cudaStreamCreate(cudaStream_t *stream);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaEventCreate(cudaEvent_t *event);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end);
"""

# cudaMemcpyKind
HOST_TO_HOST, HOST_TO_DEVICE, DEVICE_TO_HOST, DEVICE_TO_DEVICE = 0, 1, 2, 3

# gridDim.y and gridDim.z are at most this on every GPU CUDA 13 supports (CUDALAB_MAX_GRID_YZ in
# cuda/common/check.cuh); gridDim.x goes to 2^31 - 1.
MAX_GRID_YZ = 65535
INT_MAX = 2**31 - 1  # the C int the launchers take

# cudaDeviceAttr values (driver_types.h) for what cudalab reads.
ATTR = {
    "max_threads_per_block": 1,
    "max_block_dim_x": 2,
    "max_block_dim_y": 3,
    "max_block_dim_z": 4,
    "max_grid_dim_x": 5,
    "max_grid_dim_y": 6,
    "smem_per_block": 8,
    "warp_size": 10,
    "regs_per_block": 12,
    "clock_khz": 13,
    "sm_count": 16,
    "mem_clock_khz": 36,
    "bus_width_bits": 37,
    "l2_bytes": 38,
    "max_threads_per_sm": 39,
    "cc_major": 75,
    "cc_minor": 76,
    "smem_per_sm": 81,
    "regs_per_sm": 82,
    "managed_memory": 83,
    "smem_per_block_optin": 97,
    "max_blocks_per_sm": 106,
}

ffi = cffi.FFI()
ffi.cdef(_CDEF)


@functools.lru_cache(maxsize=1)
def lib():
    path = toolchain.find_libcudart()
    if path is None:
        raise ToolMissing("libcudart", "libcudart.so: searched $CUDA_HOME, beside nvcc, NVIDIA's pip wheels, "
                                       "/usr/local/cuda")
    return ffi.dlopen(path)


def check(code: int, where: str = "") -> None:
    """Raise CudaError / NoGPUError for a non-zero cudaError_t."""
    if code:
        L = lib()
        L.cudaGetLastError()
        still = L.cudaGetLastError() != 0  # a sticky error never clears: the context is lost
        raise_for_code(code, ffi.string(L.cudaGetErrorName(code)).decode(),
                       ffi.string(L.cudaGetErrorString(code)).decode(), where, still_failing=still)


def error_name(code: int) -> str:
    return ffi.string(lib().cudaGetErrorName(code)).decode()


def error_string(code: int) -> str:
    return ffi.string(lib().cudaGetErrorString(code)).decode()


def device_count() -> int:
    """Number of visible devices; raises NoGPUError when there are none or no driver."""
    n = ffi.new("int *")
    check(lib().cudaGetDeviceCount(n), "cudaGetDeviceCount")
    if n[0] == 0:
        check(100, "cudaGetDeviceCount")
    return n[0]


def gpu_available() -> tuple[bool, str]:
    """(True, "") when a device can be used, else (False, why) -- what `gpu` tests skip with."""
    try:
        device_count()
        return True, ""
    except CudalabError as e:
        return False, str(e)


def attribute(name: str | int, device: int = 0) -> int:
    code = ATTR[name] if isinstance(name, str) else int(name)
    v = ffi.new("int *")
    check(lib().cudaDeviceGetAttribute(v, code, device), f"cudaDeviceGetAttribute({name})")
    return v[0]


def attributes(device: int = 0) -> dict[str, int]:
    return {k: attribute(k, device) for k in ATTR}


def device_name(device: int = 0) -> str:
    # cudaDeviceProp begins with char name[256]; the rest of its layout changes between CUDA
    # versions, so take only the name from a generously sized buffer and read the rest as attributes.
    buf = ffi.new("char[8192]")
    check(lib().cudaGetDeviceProperties(buf, device), "cudaGetDeviceProperties")
    return ffi.string(buf, 256).decode(errors="replace")


def compute_capability(device: int = 0) -> tuple[int, int]:
    return attribute("cc_major", device), attribute("cc_minor", device)


def driver_version() -> int:
    v = ffi.new("int *")
    check(lib().cudaDriverGetVersion(v), "cudaDriverGetVersion")
    return v[0]


def runtime_version() -> int:
    v = ffi.new("int *")
    check(lib().cudaRuntimeGetVersion(v), "cudaRuntimeGetVersion")
    return v[0]


def version_string(v: int) -> str:
    return f"{v // 1000}.{(v % 1000) // 10}" if v else "none"


def mem_info() -> tuple[int, int]:
    f, t = ffi.new("size_t *"), ffi.new("size_t *")
    check(lib().cudaMemGetInfo(f, t), "cudaMemGetInfo")
    return f[0], t[0]


def synchronize() -> None:
    check(lib().cudaDeviceSynchronize(), "cudaDeviceSynchronize")


# --- memory -------------------------------------------------------------------------------------

def malloc(nbytes: int):
    p = ffi.new("void **")
    check(lib().cudaMalloc(p, max(int(nbytes), 1)), f"cudaMalloc({nbytes})")
    return p[0]


def free(ptr) -> None:
    if ptr is not None and ptr != ffi.NULL:
        check(lib().cudaFree(ptr), "cudaFree")


def memcpy_htod(dst, src: np.ndarray) -> None:
    src = np.ascontiguousarray(src)
    check(lib().cudaMemcpy(dst, ffi.from_buffer(src), src.nbytes, HOST_TO_DEVICE), "cudaMemcpy(HtoD)")


def memcpy_dtoh(dst: np.ndarray, src) -> None:
    if not dst.flags.c_contiguous or not dst.flags.writeable:
        raise ValueError("memcpy_dtoh needs a writeable C-contiguous destination array")
    check(lib().cudaMemcpy(ffi.from_buffer(dst), src, dst.nbytes, DEVICE_TO_HOST), "cudaMemcpy(DtoH)")


def memcpy_dtod(dst, src, nbytes: int, stream=None) -> None:
    check(lib().cudaMemcpyAsync(dst, src, nbytes, DEVICE_TO_DEVICE, stream or ffi.NULL), "cudaMemcpyAsync(DtoD)")


def memset(ptr, value: int, nbytes: int, stream=None) -> None:
    check(lib().cudaMemsetAsync(ptr, value, nbytes, stream or ffi.NULL), "cudaMemsetAsync")


MAX_BYTES = 2**63 - 1  # sizes go to cudaMalloc as size_t and through numpy as int64


def check_nbytes(nbytes) -> int:
    """A byte count as an int, or ValueError: negative, or past what a size could hold (before any call)."""
    if isinstance(nbytes, bool) or not isinstance(nbytes, (int, np.integer)):
        raise TypeError(f"a size in bytes must be an integer, got {nbytes!r}")
    n = int(nbytes)
    if n < 0:
        raise ValueError(f"a size in bytes must be at least 0, got {n}")
    if n > MAX_BYTES:
        raise ValueError(f"{n} bytes is more than any allocation can be (at most 2**63 - 1 bytes)")
    return n


class DeviceBuffer:
    """Owns a cudaMalloc allocation; freed on close() or garbage collection."""

    def __init__(self, nbytes: int):
        self.ptr = None  # set before anything can raise, so that __del__ finds it
        self.nbytes = check_nbytes(nbytes)
        self.ptr = malloc(self.nbytes)

    @classmethod
    def from_array(cls, a: np.ndarray) -> DeviceBuffer:
        buf = cls(a.nbytes)
        memcpy_htod(buf.ptr, a)
        return buf

    def to_host(self, out: np.ndarray) -> np.ndarray:
        if out.nbytes > self.nbytes:
            raise ValueError(f"array of {out.nbytes} bytes does not fit a buffer of {self.nbytes}")
        memcpy_dtoh(out, self.ptr)
        return out

    def fill_bytes(self, value: int, stream=None) -> None:
        memset(self.ptr, value, self.nbytes, stream)

    def close(self) -> None:
        if self.ptr is not None:
            try:
                free(self.ptr)
            finally:
                self.ptr = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _dimension(d, shape) -> int:
    # int() would truncate 2.7 to 2 and take True as 1: a size is an integer, and nothing else.
    if isinstance(d, (bool, np.bool_)) or not isinstance(d, (int, np.integer)):
        raise TypeError(f"shape {shape!r}: each size must be an integer, got {d!r} ({type(d).__name__})")
    if d < 0:
        raise ValueError(f"shape {shape!r} has a negative dimension ({d})")
    return int(d)


def _shape(shape) -> tuple[int, ...]:
    """A shape as a tuple of Python ints: one integer or a sequence of them, none negative. TypeError
    for a float, a bool or anything that is not a size; ValueError for a negative one."""
    if isinstance(shape, (str, bytes)) or not hasattr(shape, "__iter__"):
        return (_dimension(shape, shape),)
    return tuple(_dimension(d, shape) for d in shape)


class DeviceArray(DeviceBuffer):
    """Device memory with a shape and a dtype: DeviceBuffer plus numpy metadata.
    It passes wherever a DeviceBuffer does (every cudalab library takes it for a device pointer)."""

    def __init__(self, shape, dtype):
        dt = np.dtype(dtype)
        if dt.hasobject:
            raise TypeError(f"dtype {dt} cannot live in device memory")
        shape = _shape(shape)
        self.ptr = None
        # Python ints: numpy's int64 product wraps, so (2**32, 2**32) came out as 0 bytes and (2**62, 3)
        # as a negative count, and both allocated one byte.
        count = math.prod(shape)
        if count * dt.itemsize > MAX_BYTES:
            raise ValueError(f"shape {shape} of {dt.name} is {count} elements of {dt.itemsize} bytes, "
                             f"{count * dt.itemsize} bytes: more than any allocation can be (at most 2**63 - 1)")
        self.shape = shape
        self.dtype = dt
        super().__init__(count * dt.itemsize)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d device array")
        return self.shape[0]

    def copy_from(self, a: np.ndarray) -> DeviceArray:
        a = np.ascontiguousarray(a, dtype=self.dtype)
        if a.shape != self.shape:
            raise ValueError(f"array of shape {a.shape} does not match the device array's {self.shape}")
        if self.ptr is None:
            raise ValueError("the device array was freed")
        memcpy_htod(self.ptr, a)
        return self

    def to_host(self, out: np.ndarray | None = None) -> np.ndarray:
        """Copy to a new numpy array (or into `out`). cudaMemcpy waits for kernels queued before it."""
        if self.ptr is None:
            raise ValueError("the device array was freed")
        if out is None:
            out = np.empty(self.shape, self.dtype)
        elif out.dtype != self.dtype or out.shape != self.shape:
            raise ValueError(f"out must be {self.dtype} of shape {self.shape}, got {out.dtype} {out.shape}")
        if out.nbytes:
            super().to_host(out)
        return out

    def __repr__(self):
        state = "freed" if self.ptr is None else f"{self.nbytes} bytes"
        return f"DeviceArray(shape={self.shape}, dtype={self.dtype.name}, {state})"


def to_device(a) -> DeviceArray:
    """Copy a numpy array to new device memory. A non-contiguous array is made contiguous first."""
    a = np.ascontiguousarray(a)
    d = DeviceArray(a.shape, a.dtype)
    if a.nbytes:
        memcpy_htod(d.ptr, a)
    return d


def empty(shape, dtype=np.float32) -> DeviceArray:
    """Uninitialised device memory of the given shape and dtype."""
    return DeviceArray(shape, dtype)



# --- streams and events -------------------------------------------------------------------------

class Stream:
    def __init__(self):
        p = ffi.new("cudaStream_t *")
        check(lib().cudaStreamCreate(p), "cudaStreamCreate")
        self.handle = p[0]

    def synchronize(self) -> None:
        check(lib().cudaStreamSynchronize(self.handle), "cudaStreamSynchronize")

    def close(self) -> None:
        if self.handle is not None:
            check(lib().cudaStreamDestroy(self.handle), "cudaStreamDestroy")
            self.handle = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Event:
    def __init__(self):
        p = ffi.new("cudaEvent_t *")
        check(lib().cudaEventCreate(p), "cudaEventCreate")
        self.handle = p[0]

    def record(self, stream=None) -> None:
        check(lib().cudaEventRecord(self.handle, stream or ffi.NULL), "cudaEventRecord")

    def synchronize(self) -> None:
        check(lib().cudaEventSynchronize(self.handle), "cudaEventSynchronize")

    def elapsed_ms(self, end: Event) -> float:
        ms = ffi.new("float *")
        check(lib().cudaEventElapsedTime(ms, self.handle, end.handle), "cudaEventElapsedTime")
        return float(ms[0])

    def close(self) -> None:
        if self.handle is not None:
            check(lib().cudaEventDestroy(self.handle), "cudaEventDestroy")
            self.handle = None


@dataclass(frozen=True)
class DeviceSummary:
    name: str
    cc: str
    sm_count: int
    driver: str
    runtime: str
    memory_gib: float


def summary(device: int = 0) -> DeviceSummary:
    _, total = mem_info()
    major, minor = compute_capability(device)
    return DeviceSummary(device_name(device), f"{major}.{minor}", attribute("sm_count", device),
                         version_string(driver_version()), version_string(runtime_version()), total / 2**30)


# NoGPUError (harness.base.errors) asks through this for the driver-too-old sentence; looked up at call
# time, so a test that replaces driver_version is seen.
_errors.set_version_source(lambda: (driver_version(), runtime_version()))
