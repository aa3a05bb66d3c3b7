"""`NVRTCCompiler`: CUDA C++ to a cubin for one GPU architecture with NVRTC (libnvrtc through ctypes).

libnvrtc is found in this order: `$NVRTC_PATH` (a file); the PyPI wheels (`nvidia-cuda-nvrtc`:
`nvidia/cu13/lib/libnvrtc.so.13`; `nvidia-cuda-nvrtc-cu12`: `nvidia/cuda_nvrtc/lib/libnvrtc.so.12`); `$CUDA_HOME`,
`$CUDA_PATH`, /usr/local/cuda (lib64); the loader's search path. Given the driver's CUDA major version, a library of
that major is tried first (a cubin from a newer major does not load on an older driver).

NVRTC itself has no headers. `cuda_fp16.h`/`cuda_bf16.h` come from `$CUDA_INCLUDE_PATH` when it is set; else from
NVRTC 13's own bundled headers (exactly its version), unpacked once into the cache root for the sources that include
them; else (NVRTC 12) from the first of the `nvidia-cuda-runtime` wheels, `$CUDA_HOME/include`,
/usr/local/cuda/include that has them.
Compiled cubins go through `ember.runtime.Compiler`'s disk cache, keyed by NVRTC's version and the architecture.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import os
import re
from collections.abc import Sequence
from pathlib import Path

from ember.runtime import CompileError, Compiler

NVRTC_PATH_ENV = "NVRTC_PATH"
INCLUDE_PATH_ENV = "CUDA_INCLUDE_PATH"
_WHEEL_LIBS = {13: "cu13/lib/libnvrtc.so.13", 12: "cuda_nvrtc/lib/libnvrtc.so.12"}  # under the `nvidia` package
_WHEEL_INCLUDES = ("cu13/include", "cuda_runtime/include")
_ARCH = re.compile(r"sm_(\d+)[af]?")
EM_CUDA = 190  # the ELF e_machine of a cubin


def _toolkit_roots() -> list[Path]:
    roots = [os.environ.get(v, "").strip() for v in ("CUDA_HOME", "CUDA_PATH")]
    return [Path(r) for r in roots if r] + [Path("/usr/local/cuda"), Path("/opt/cuda")]


def _wheel_roots() -> list[Path]:
    spec = importlib.util.find_spec("nvidia")
    return [Path(p) for p in (spec.submodule_search_locations or [])] if spec is not None else []


def nvrtc_candidates(prefer_major: int | None = None) -> list[str]:
    """Where libnvrtc may be, in the order they are tried (`$NVRTC_PATH` alone when it is set)."""
    if override := os.environ.get(NVRTC_PATH_ENV, "").strip():
        return [override]
    majors = sorted(_WHEEL_LIBS, key=lambda m: (m != prefer_major, -m))
    found = [str(root / _WHEEL_LIBS[m]) for m in majors for root in _wheel_roots() if (root / _WHEEL_LIBS[m]).is_file()]
    for root in _toolkit_roots():
        found += [str(p) for m in majors for p in [root / "lib64" / f"libnvrtc.so.{m}"] if p.is_file()]
        if (root / "lib64" / "libnvrtc.so").is_file():
            found.append(str(root / "lib64" / "libnvrtc.so"))
    return found + [f"libnvrtc.so.{m}" for m in majors] + ["libnvrtc.so"]


class NVRTC:
    """libnvrtc at `path`, its entry points declared; `compile(src, options)` returns (cubin, log)."""

    def __init__(self, path: str):
        self.path = path
        self.lib = ctypes.CDLL(path)  # OSError when it is not there: the caller tries the next place
        c = ctypes
        signatures = {
            "nvrtcVersion": [c.POINTER(c.c_int), c.POINTER(c.c_int)],
            "nvrtcCreateProgram": [c.POINTER(c.c_void_p), c.c_char_p, c.c_char_p, c.c_int, c.c_void_p, c.c_void_p],
            "nvrtcCompileProgram": [c.c_void_p, c.c_int, c.POINTER(c.c_char_p)],
            "nvrtcGetProgramLogSize": [c.c_void_p, c.POINTER(c.c_size_t)],
            "nvrtcGetProgramLog": [c.c_void_p, c.c_char_p],
            "nvrtcGetCUBINSize": [c.c_void_p, c.POINTER(c.c_size_t)],
            "nvrtcGetCUBIN": [c.c_void_p, c.c_char_p],
            "nvrtcDestroyProgram": [c.POINTER(c.c_void_p)],
        }
        for name, argtypes in signatures.items():
            fn = getattr(self.lib, name)
            fn.argtypes, fn.restype = argtypes, c.c_int
        self.lib.nvrtcGetErrorString.argtypes, self.lib.nvrtcGetErrorString.restype = [c.c_int], c.c_char_p
        major, minor = c.c_int(), c.c_int()
        self._check("nvrtcVersion", self.lib.nvrtcVersion(c.byref(major), c.byref(minor)))
        self.version = (major.value, minor.value)
        self.bundled_headers = hasattr(self.lib, "nvrtcInstallBundledHeaders")
        if self.bundled_headers:
            self.lib.nvrtcInstallBundledHeaders.argtypes = [c.c_char_p, c.c_uint, c.POINTER(c.c_char_p)]
            self.lib.nvrtcInstallBundledHeaders.restype = c.c_int

    def _check(self, call: str, status: int, log: str = "", src: str = "") -> None:
        if status != 0:
            text = (self.lib.nvrtcGetErrorString(status) or b"?").decode()
            raise CompileError(f"NVRTC {self.version_text()}: {call} failed: {text} ({status})"
                               + (f"\n{log}" if log else "") + (f"\n--- source ---\n{src}" if src else ""))

    def version_text(self) -> str:
        """NVRTC's version as 'major.minor'."""
        return ".".join(map(str, getattr(self, "version", ("?",))))

    def compile(self, src: str, options: Sequence[str], name: str = "kernel.cu") -> tuple[bytes, str]:
        """Compile `src` with `options` (a real `--gpu-architecture=sm_XY`, so that there is a cubin); returns the
        cubin and NVRTC's log (warnings). A rejected source raises CompileError with the log and the source."""
        c, prog = ctypes, ctypes.c_void_p()
        self._check("nvrtcCreateProgram", self.lib.nvrtcCreateProgram(c.byref(prog), src.encode(), name.encode(),
                                                                        0, None, None))
        try:
            opts = (c.c_char_p * len(options))(*(o.encode() for o in options))
            status = self.lib.nvrtcCompileProgram(prog, len(options), opts)
            size = c.c_size_t()
            self._check("nvrtcGetProgramLogSize", self.lib.nvrtcGetProgramLogSize(prog, c.byref(size)))
            log_buf = c.create_string_buffer(size.value)
            self._check("nvrtcGetProgramLog", self.lib.nvrtcGetProgramLog(prog, log_buf))
            log = log_buf.value.decode(errors="replace").strip()
            self._check(f"nvrtcCompileProgram({' '.join(options)})", status, log, src)
            self._check("nvrtcGetCUBINSize", self.lib.nvrtcGetCUBINSize(prog, c.byref(size)))
            if size.value == 0:
                raise CompileError(f"NVRTC {self.version_text()}: no cubin (options {' '.join(options)}: a virtual "
                                   f"compute_XX architecture gives PTX only; name a real sm_XY)")
            cubin = c.create_string_buffer(size.value)
            self._check("nvrtcGetCUBIN", self.lib.nvrtcGetCUBIN(prog, cubin))
            return cubin.raw, log
        finally:
            self.lib.nvrtcDestroyProgram(c.byref(prog))

    def ptx(self, src: str, options: Sequence[str], name: str = "kernel.cu") -> str:
        """The PTX text of `src` (to inspect what a renderer's source becomes: vector loads, shared memory)."""
        c, prog = ctypes, ctypes.c_void_p()
        self._check("nvrtcCreateProgram", self.lib.nvrtcCreateProgram(c.byref(prog), src.encode(), name.encode(),
                                                                        0, None, None))
        try:
            opts = (c.c_char_p * len(options))(*(o.encode() for o in options))
            self._check(f"nvrtcCompileProgram({' '.join(options)})", self.lib.nvrtcCompileProgram(prog, len(options),
                                                                                                  opts), "", src)
            size = c.c_size_t()
            self._check("nvrtcGetPTXSize", self.lib.nvrtcGetPTXSize(prog, c.byref(size)))
            text = c.create_string_buffer(size.value)
            self._check("nvrtcGetPTX", self.lib.nvrtcGetPTX(prog, text))
            return text.value.decode()
        finally:
            self.lib.nvrtcDestroyProgram(c.byref(prog))

    def install_bundled_headers(self, folder: Path) -> Path:
        """Unpack NVRTC 13's bundled headers (cuda_fp16.h, cuda_bf16.h, ...) into `folder` (once: a folder of the
        same version is kept); returns it."""
        if not self.bundled_headers:
            raise CompileError(f"NVRTC {self.version_text()} bundles no headers (NVRTC 13 and later do); point "
                               f"${INCLUDE_PATH_ENV} at a folder with cuda_fp16.h (the CUDA toolkit's include/)")
        err = ctypes.c_char_p()
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        status = self.lib.nvrtcInstallBundledHeaders(str(folder).encode(), 0, ctypes.byref(err))
        self._check(f"nvrtcInstallBundledHeaders({folder})", status, (err.value or b"").decode(errors="replace"))
        return folder


@functools.cache
def _load_nvrtc(candidates: tuple[str, ...]) -> NVRTC:
    tried = []
    for path in candidates:
        try:
            return NVRTC(path)
        except (OSError, AttributeError) as e:
            tried.append(f"{path}: {e}")
    raise RuntimeError("NVRTC: libnvrtc was not found; install the wheel (pip install nvidia-cuda-nvrtc), or set "
                       f"${NVRTC_PATH_ENV} to a libnvrtc.so. Tried:\n  " + "\n  ".join(tried))


def load_nvrtc(prefer_major: int | None = None) -> NVRTC:
    """The first libnvrtc found (see the module docstring), loaded once; a library of CUDA major `prefer_major`
    first. None found raises RuntimeError listing the places tried."""
    return _load_nvrtc(tuple(nvrtc_candidates(prefer_major)))


def cuda_include_dirs() -> list[Path]:
    """The folders of `$CUDA_INCLUDE_PATH`, else those of the wheels and toolkits that hold cuda_fp16.h."""
    if listed := [Path(p) for p in os.environ.get(INCLUDE_PATH_ENV, "").split(os.pathsep) if p.strip()]:
        return listed
    listed = [root / sub for root in _wheel_roots() for sub in _WHEEL_INCLUDES]
    listed += [root / "include" for root in _toolkit_roots()]
    return list(dict.fromkeys(p for p in listed if (p / "cuda_fp16.h").is_file()))


def cubin_arch(cubin: bytes) -> int:
    """The SM number a cubin is built for (90 for sm_90), read from its ELF header; ValueError if it is no cubin."""
    if len(cubin) < 52 or cubin[:4] != b"\x7fELF" or cubin[4] != 2:
        raise ValueError(f"cubin_arch: not a 64-bit ELF file (starts {cubin[:8]!r})")
    if (machine := int.from_bytes(cubin[18:20], "little")) != EM_CUDA:
        raise ValueError(f"cubin_arch: ELF e_machine is {machine}, not EM_CUDA ({EM_CUDA})")
    flags = int.from_bytes(cubin[48:52], "little")
    # ELF ABI version 8 and later (CUDA 12.8+/13) keep the SM in bits 8..15 of e_flags, earlier ones in bits 0..7
    return (flags >> 8) & 0xFF if cubin[8] >= 8 else flags & 0xFF


def cubin_global(cubin: bytes, symbol: str) -> bytes | None:
    """The initial bytes of the `__device__` variable `symbol` of a cubin (its ELF symbol table entry and the section
    holding it, .nv.global.init), None when the cubin has no such initialised variable. A renderer passes facts to
    the runtime this way: `CUDARenderer` defines `emb_dynamic_shared_<kernel>` for a kernel that needs dynamic shared
    memory."""
    if len(cubin) < 64 or cubin[:4] != b"\x7fELF" or cubin[4] != 2:
        raise ValueError(f"cubin_global: not a 64-bit ELF file (starts {cubin[:8]!r})")
    shoff, shentsize, shnum = (int.from_bytes(cubin[40:48], "little"), int.from_bytes(cubin[58:60], "little"),
                               int.from_bytes(cubin[60:62], "little"))
    sections = []
    for i in range(shnum):  # (sh_type, sh_offset, sh_size, sh_link, sh_entsize)
        h = cubin[shoff + i * shentsize:shoff + (i + 1) * shentsize]
        sections.append((int.from_bytes(h[4:8], "little"), int.from_bytes(h[24:32], "little"),
                         int.from_bytes(h[32:40], "little"), int.from_bytes(h[40:44], "little"),
                         int.from_bytes(h[56:64], "little")))
    want = symbol.encode() + b"\0"
    for kind, offset, size, link, entsize in sections:
        if kind != 2 or entsize != 24:  # SHT_SYMTAB, Elf64_Sym
            continue
        strtab = sections[link][1]
        for at in range(offset, offset + size, entsize):
            name = int.from_bytes(cubin[at:at + 4], "little")
            if cubin[strtab + name:strtab + name + len(want)] != want:
                continue
            shndx = int.from_bytes(cubin[at + 6:at + 8], "little")
            value, nbytes = int.from_bytes(cubin[at + 8:at + 16], "little"), int.from_bytes(cubin[at + 16:at + 24],
                                                                                            "little")
            if not 0 < shndx < len(sections) or sections[shndx][0] != 1:  # SHT_PROGBITS: initialised data
                return None
            start = sections[shndx][1] + value
            return cubin[start:start + nbytes]
    return None


class NVRTCCompiler(Compiler):
    """CUDA C++ kernels (`extern "C" __global__`) to a cubin for `arch` ('sm_90'), through NVRTC.

        cubin = NVRTCCompiler("sm_90").compile_cached('extern "C" __global__ void k(float* x) { x[0] = 1; }')

    The cache key names NVRTC's version and the architecture. A batch is the sources one after the other in one
    program (distinct kernel names; a batch NVRTC rejects is compiled source by source, see `Compiler`)."""

    batches = True

    def __init__(self, arch: str = "sm_90", prefer_major: int | None = None):
        if not isinstance(arch, str) or not (m := _ARCH.fullmatch(arch)):
            raise ValueError(f"NVRTCCompiler: arch must name a real GPU architecture like 'sm_90' or 'sm_90a', "
                             f"got {arch!r}")
        self.arch, self.sm = arch, int(m.group(1))
        self.nvrtc = load_nvrtc(prefer_major)
        if self.sm < 75 and self.nvrtc.version >= (13, 0):
            raise ValueError(f"NVRTCCompiler: NVRTC {self.nvrtc.version_text()} builds sm_75 and newer, not {arch}")
        # NVRTC 13's bundled headers match it exactly: a toolkit's may be of another version
        explicit = bool(os.environ.get(INCLUDE_PATH_ENV, "").strip())
        self.bundled = self.nvrtc.bundled_headers and not explicit
        includes = [] if self.bundled else cuda_include_dirs()
        # --minimal (NVRTC 12.4+) skips NVRTC's default header preamble: a third less time per kernel
        minimal = ("--minimal",) if self.nvrtc.version >= (12, 4) else ()
        self.flags = (f"--gpu-architecture={arch}", *minimal, *(f"-I{p}" for p in includes))
        super().__init__(f"nvrtc {self.nvrtc.version_text()} {arch}")

    def _header_flags(self, src: str) -> tuple[str, ...]:
        # the bundled headers are unpacked on the first source that includes one
        if not self.bundled or "#include <cuda_" not in src:
            return ()
        folder = self.cache_path("").parent.parent / f"nvrtc-{self.nvrtc.version_text()}-include"
        return (f"-I{self.nvrtc.install_bundled_headers(folder)}",)

    def check_binary(self, lib: bytes) -> None:
        """A cached cubin must be what `compile` makes: a 64-bit ELF with e_machine EM_CUDA (190) for this SM."""
        if (sm := cubin_arch(lib)) != self.sm:
            raise ValueError(f"a cubin for sm_{sm}, not {self.arch}")

    def compile(self, src: str) -> bytes:
        """The cubin of `src` (NVRTC's warnings dropped); a rejected source raises CompileError with the log."""
        cubin, _ = self.nvrtc.compile(src, (*self.flags, *self._header_flags(src)))
        return cubin

    def compile_batch(self, srcs: Sequence[str]) -> bytes:
        """One cubin holding the kernels of all `srcs` (the renderer guards its shared prelude)."""
        return self.compile("\n".join(srcs))


__all__ = ["NVRTC", "NVRTCCompiler", "cubin_arch", "cubin_global", "cuda_include_dirs", "load_nvrtc",
           "nvrtc_candidates",
           "NVRTC_PATH_ENV", "INCLUDE_PATH_ENV"]
