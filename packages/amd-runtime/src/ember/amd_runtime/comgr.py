"""AMD's code object manager (libamd_comgr) through ctypes: HIP source to a gfx9 code object, and `HIPCompiler`.

The library is found in this order: `$COMGR_3_PATH`, `$COMGR_PATH` (files; when one is set only the set ones are
tried), `$ROCM_PATH/lib/libamd_comgr.so`, /opt/rocm/lib/libamd_comgr.so, then the loader's search path
(`libamd_comgr.so`, `.so.3`, `.so.2`). `amd_comgr_get_version` picks the enum table: comgr 3 (ROCm >= 6.4)
renumbered the language and action enums (ROCm/llvm-project#272), the data kinds did not change. Both versions take
options through `amd_comgr_action_info_set_option_list`.

compile_hip: COMPILE_SOURCE_WITH_DEVICE_LIBS_TO_BC (source -> bitcode, with the HIP options) ->
CODEGEN_BC_TO_RELOCATABLE (-O3, internalize) -> LINK_RELOCATABLE_TO_EXECUTABLE, then the EXECUTABLE data
(`compile_bitcode` and `assemble` run the tail of that chain). A failed action raises `ComgrError` (a CompileError)
holding comgr's log.

`HIPCompiler(arch)` compiles through comgr when it loads and lists `arch`, else through clang/ld.lld
(`clang_compiler.ClangCompiler`); both are `ember.runtime.Compiler`s, so code objects are cached on disk by the
runtime, keyed by the compiler's identity and version and the arch.
"""

from __future__ import annotations

import ctypes
import functools
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ember.amd_runtime import elf
from ember.runtime import CompileError, Compiler

COMGR_PATH_ENVS = ("COMGR_3_PATH", "COMGR_PATH")
SONAMES = ("libamd_comgr.so", "libamd_comgr.so.3", "libamd_comgr.so.2")
STATUS_TEXT = {0: "success", 1: "error", 2: "invalid argument", 3: "out of resources"}


@dataclass(frozen=True)
class ComgrEnums:
    """The enum values that differ between comgr majors (and the data kinds, which do not)."""

    language_hip: int
    language_llvm_ir: int
    action_compile_source_with_device_libs_to_bc: int
    action_link_bc_to_bc: int
    action_codegen_bc_to_relocatable: int
    action_codegen_bc_to_assembly: int
    action_link_relocatable_to_executable: int
    action_assemble_source_to_relocatable: int
    action_disassemble_executable_to_source: int
    data_kind_source: int = 1
    data_kind_include: int = 2
    data_kind_precompiled_header: int = 3
    data_kind_diagnostic: int = 4
    data_kind_log: int = 5
    data_kind_bc: int = 6
    data_kind_relocatable: int = 7
    data_kind_executable: int = 8
    data_kind_bytes: int = 9


# comgr 2.x (ROCm <= 6.3) and 3.x (ROCm >= 6.4): spec amd_hcq.md section 4
ENUMS_V2 = ComgrEnums(language_hip=4, language_llvm_ir=5, action_compile_source_with_device_libs_to_bc=15,
                      action_link_bc_to_bc=4, action_codegen_bc_to_relocatable=6, action_codegen_bc_to_assembly=7,
                      action_link_relocatable_to_executable=9, action_assemble_source_to_relocatable=10,
                      action_disassemble_executable_to_source=12)
ENUMS_V3 = ComgrEnums(language_hip=3, language_llvm_ir=4, action_compile_source_with_device_libs_to_bc=12,
                      action_link_bc_to_bc=3, action_codegen_bc_to_relocatable=4, action_codegen_bc_to_assembly=5,
                      action_link_relocatable_to_executable=7, action_assemble_source_to_relocatable=8,
                      action_disassemble_executable_to_source=10)


def enums_for(major: int) -> ComgrEnums:
    """The enum table of comgr `major` (2 or 3); other majors raise RuntimeError."""
    if major == 2:
        return ENUMS_V2
    if major == 3:
        return ENUMS_V3
    raise RuntimeError(f"comgr {major}.x is not supported (known: 2.x, 3.x); its enums may have changed again")


# the HIP front-end options (no ROCm headers: our kernels use only __builtin_amdgcn_*)
HIP_OPTIONS = ("-O3", "-mcumode", "--hip-version=6.0.32830", "-DHIP_VERSION_MAJOR=6", "-DHIP_VERSION_MINOR=0",
               "-DHIP_VERSION_PATCH=32830", "-D__HIPCC_RTC__", "-std=c++14", "-nogpuinc", "-Wno-gnu-line-marker",
               "-Wno-missing-prototypes", "-Xclang", "-disable-llvm-passes", "-Xclang", "-aux-triple", "-Xclang",
               "x86_64-unknown-linux-gnu")
CODEGEN_OPTIONS = ("-O3", "-mllvm", "-amdgpu-internalize-symbols")


class ComgrError(CompileError):
    """A comgr call or action failed; `log` holds comgr's log of the failed action (may be empty)."""

    def __init__(self, message: str, status: int = 1, log: str = ""):
        super().__init__(message + (f"\n--- comgr log ---\n{log}" if log else ""))
        self.status, self.log = status, log


class _Handle(ctypes.Structure):
    """amd_comgr_data_t / _data_set_t / _action_info_t: `struct {uint64_t handle;}` passed by value."""

    _fields_ = [("handle", ctypes.c_uint64)]


def comgr_candidates() -> list[str]:
    """Where libamd_comgr may be, in the order tried (only the env paths when one is set)."""
    if explicit := [p for v in COMGR_PATH_ENVS if (p := os.environ.get(v, "").strip())]:
        return explicit
    roots = [r for r in (os.environ.get("ROCM_PATH", "").strip(), "/opt/rocm") if r]
    found = [str(lib) for r in roots if (lib := Path(r) / "lib" / "libamd_comgr.so").is_file()]
    return found + list(SONAMES)


class Comgr:
    """libamd_comgr at `path`, its entry points declared and its version's enum table chosen."""

    def __init__(self, path: str):
        self.path = path
        self.lib = ctypes.CDLL(path)  # OSError when it is not there
        c, h, hp = ctypes, _Handle, ctypes.POINTER(_Handle)
        sz, szp, ccp = c.c_size_t, c.POINTER(c.c_size_t), c.c_char_p
        signatures = {
            "amd_comgr_status_string": [c.c_int, c.POINTER(ccp)],
            "amd_comgr_create_action_info": [hp], "amd_comgr_destroy_action_info": [h],
            "amd_comgr_action_info_set_language": [h, c.c_int], "amd_comgr_action_info_set_isa_name": [h, ccp],
            "amd_comgr_action_info_set_logging": [h, c.c_bool],
            "amd_comgr_action_info_set_option_list": [h, c.POINTER(ccp), sz],
            "amd_comgr_create_data_set": [hp], "amd_comgr_destroy_data_set": [h],
            "amd_comgr_create_data": [c.c_int, hp], "amd_comgr_release_data": [h],
            "amd_comgr_set_data": [h, sz, ccp], "amd_comgr_set_data_name": [h, ccp],
            "amd_comgr_get_data": [h, szp, ccp], "amd_comgr_data_set_add": [h, h],
            "amd_comgr_do_action": [c.c_int, h, h, h],
            "amd_comgr_action_data_count": [h, c.c_int, szp],
            "amd_comgr_action_data_get_data": [h, c.c_int, sz, hp],
            "amd_comgr_get_isa_count": [szp], "amd_comgr_get_isa_name": [sz, c.POINTER(ccp)],
        }
        for name, argtypes in signatures.items():
            try:
                fn = getattr(self.lib, name)
            except AttributeError:
                raise RuntimeError(f"comgr: {path} has no {name}; not a libamd_comgr of version 2 or 3") from None
            fn.argtypes, fn.restype = argtypes, c.c_int
        self.lib.amd_comgr_get_version.argtypes = [szp, szp]
        self.lib.amd_comgr_get_version.restype = None
        major, minor = c.c_size_t(), c.c_size_t()
        self.lib.amd_comgr_get_version(c.byref(major), c.byref(minor))
        self.version = (major.value, minor.value)
        self.enums = enums_for(major.value)

    def _status_text(self, status: int) -> str:
        text = ctypes.c_char_p()
        if self.lib.amd_comgr_status_string(status, ctypes.byref(text)) == 0 and text.value:
            return text.value.decode(errors="replace")
        return STATUS_TEXT.get(status, "unknown status")

    def _check(self, call: str, status: int, log: str = "") -> None:
        if status != 0:
            raise ComgrError(f"comgr {self.version[0]}.{self.version[1]} ({self.path}): {call} failed: "
                             f"{self._status_text(status)} ({status})", status, log)

    def _call(self, name: str, *args: object) -> None:
        self._check(name, getattr(self.lib, name)(*args))

    def _data_bytes(self, data_set: _Handle, kind: int, index: int = 0) -> bytes:
        data = _Handle()
        self._call("amd_comgr_action_data_get_data", data_set, kind, index, ctypes.byref(data))
        try:
            size = ctypes.c_size_t()
            self._call("amd_comgr_get_data", data, ctypes.byref(size), None)
            buf = ctypes.create_string_buffer(size.value)
            self._call("amd_comgr_get_data", data, ctypes.byref(size), buf)
            return buf.raw[:size.value]
        finally:
            self.lib.amd_comgr_release_data(data)

    def _log(self, data_set: _Handle) -> str:
        """The LOG data of a result set ('' when there is none)."""
        count = ctypes.c_size_t()
        if self.lib.amd_comgr_action_data_count(data_set, self.enums.data_kind_log, ctypes.byref(count)) != 0:
            return ""
        return "\n".join(self._data_bytes(data_set, self.enums.data_kind_log, i).decode(errors="replace")
                         for i in range(count.value))

    def _set_options(self, info: _Handle, options: Sequence[str]) -> None:
        opts = (ctypes.c_char_p * max(len(options), 1))(*(o.encode() for o in options))
        self._call("amd_comgr_action_info_set_option_list", info, opts, len(options))

    def _pipeline(self, src: bytes, name: str, language: int, arch: str,
                  steps: Sequence[tuple[str, int, Sequence[str]]], what: str, kind: int | None = None) -> bytes:
        """Feed `src` (named `name`, of data `kind`, SOURCE by default) through the actions `steps` (action name,
        kind, options), each one's result the next one's input, and return the EXECUTABLE of the last."""
        e, c = self.enums, ctypes
        info = _Handle()
        self._call("amd_comgr_create_action_info", c.byref(info))
        sets: list[_Handle] = []
        try:
            self._call("amd_comgr_action_info_set_language", info, language)
            self._call("amd_comgr_action_info_set_isa_name", info, f"amdgcn-amd-amdhsa--{arch}".encode())
            self._call("amd_comgr_action_info_set_logging", info, True)
            for _ in range(len(steps) + 1):
                sets.append(_Handle())
                self._call("amd_comgr_create_data_set", c.byref(sets[-1]))
            data = _Handle()
            self._call("amd_comgr_create_data", e.data_kind_source if kind is None else kind, c.byref(data))
            try:
                self._call("amd_comgr_set_data", data, len(src), src)
                self._call("amd_comgr_set_data_name", data, name.encode())
                self._call("amd_comgr_data_set_add", sets[0], data)
            finally:
                self.lib.amd_comgr_release_data(data)
            for i, (action_name, action, options) in enumerate(steps):
                self._set_options(info, options)
                status = self.lib.amd_comgr_do_action(action, info, sets[i], sets[i + 1])
                if status != 0:
                    self._check(f"{what} for {arch}: {action_name} ({' '.join(options)})", status,
                                self._log(sets[i + 1]))
            return self._data_bytes(sets[-1], e.data_kind_executable)
        finally:
            for s in sets:
                self.lib.amd_comgr_destroy_data_set(s)
            self.lib.amd_comgr_destroy_action_info(info)

    def compile_hip(self, src: str, arch: str, options: Sequence[str] = HIP_OPTIONS) -> bytes:
        """HIP source to a code object (ELF bytes) for `arch` ("gfx942", "gfx950"; target features may follow,
        "gfx942:sramecc+:xnack-"). A rejected source raises ComgrError with comgr's log."""
        e = self.enums
        steps = (("COMPILE_SOURCE_WITH_DEVICE_LIBS_TO_BC", e.action_compile_source_with_device_libs_to_bc,
                  [*options, f"--offload-arch={arch}"]),
                 ("CODEGEN_BC_TO_RELOCATABLE", e.action_codegen_bc_to_relocatable, CODEGEN_OPTIONS),
                 ("LINK_RELOCATABLE_TO_EXECUTABLE", e.action_link_relocatable_to_executable, ()))
        return self._pipeline(src.encode(), "<null>", e.language_hip, arch, steps, "compile_hip")

    def compile_bitcode(self, bitcode: bytes, arch: str) -> bytes:
        """LLVM bitcode (for amdgcn-amd-amdhsa) to a code object for `arch`: CODEGEN_BC_TO_RELOCATABLE, then link."""
        e = self.enums
        steps = (("CODEGEN_BC_TO_RELOCATABLE", e.action_codegen_bc_to_relocatable, CODEGEN_OPTIONS),
                 ("LINK_RELOCATABLE_TO_EXECUTABLE", e.action_link_relocatable_to_executable, ()))
        return self._pipeline(bitcode, "<null>.bc", e.language_llvm_ir, arch, steps, "compile_bitcode",
                              e.data_kind_bc)

    def assemble(self, src: str, arch: str) -> bytes:
        """AMDGPU assembly (`.text`, `.amdhsa_kernel` directives) to a code object for `arch`."""
        e = self.enums
        steps = (("ASSEMBLE_SOURCE_TO_RELOCATABLE", e.action_assemble_source_to_relocatable, ()),
                 ("LINK_RELOCATABLE_TO_EXECUTABLE", e.action_link_relocatable_to_executable, ()))
        return self._pipeline(src.encode(), "<null>.s", e.language_hip, arch, steps, "assemble")

    def list_isas(self) -> list[str]:
        """The ISA names this comgr supports ("amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-", ...)."""
        count = ctypes.c_size_t()
        self._call("amd_comgr_get_isa_count", ctypes.byref(count))
        names = []
        for i in range(count.value):
            name = ctypes.c_char_p()
            self._call("amd_comgr_get_isa_name", i, ctypes.byref(name))
            names.append((name.value or b"").decode())
        return names

    def supports(self, arch: str) -> bool:
        """Whether `list_isas` names `arch` (its processor; Debian's comgr 2 of LLVM 15 predates gfx942)."""
        return any(isa.split(":")[0] == f"amdgcn-amd-amdhsa--{arch.split(':')[0]}" for isa in self.list_isas())


@functools.cache
def _load(candidates: tuple[str, ...]) -> Comgr:
    errors = []
    for path in candidates:
        try:
            return Comgr(path)
        except OSError as e:
            errors.append(f"{path}: {e}")
    raise FileNotFoundError("comgr: libamd_comgr was not found (set COMGR_PATH, or COMGR_3_PATH, to the library, or "
                            "ROCM_PATH to a ROCm install); tried:\n  " + "\n  ".join(errors))


def load_comgr(path: str | None = None) -> Comgr:
    """The comgr at `path`, or the first of `comgr_candidates()` that loads (once per process and path list)."""
    return _load((path,) if path else tuple(comgr_candidates()))


def comgr_available(arch: str | None = None) -> bool:
    """Whether a libamd_comgr of a supported version loads (and, given `arch`, compiles for it)."""
    try:
        lib = load_comgr()
        return arch is None or lib.supports(arch)
    except (FileNotFoundError, RuntimeError):
        return False


def check_code_object(lib: bytes, arch: str) -> None:
    """ValueError unless `lib` is an AMDGPU code object for `arch` (ELF64, e_machine EM_AMDGPU = 224, the HSA OS ABI,
    its mach, well-formed kernel descriptors): what the AMD compilers make, checked on a compile-cache entry before
    it is loaded (a wrong one is rebuilt with a warning, see ember.runtime.compiler)."""
    elf.load_code_object(lib, arch.split(":")[0])


class ComgrCompiler(Compiler):
    """HIP source to a code object for `arch` through comgr; cached on disk by comgr's version and the arch. The
    result is checked to be an AMDGPU code object for `arch`."""

    flags = HIP_OPTIONS

    def __init__(self, arch: str, comgr: Comgr | None = None):
        self.arch, self.comgr = arch, comgr or load_comgr()
        major, minor = self.comgr.version
        super().__init__(f"hip comgr {major}.{minor} {Path(self.comgr.path).name} {arch}")

    def check_binary(self, lib: bytes) -> None:
        check_code_object(lib, self.arch)

    def compile(self, src: str) -> bytes:
        lib = self.comgr.compile_hip(src, self.arch)
        try:
            elf.load_code_object(lib, self.arch.split(":")[0])
        except ValueError as e:
            raise CompileError(f"comgr {self.comgr.version}: the output for {self.arch} is not a usable code "
                               f"object: {e}") from None
        return lib


class HIPCompiler(Compiler):
    """The AMD device's compiler: comgr when it loads and knows `arch`, else clang/ld.lld
    (clang_compiler.ClangCompiler). The choice and its version are part of the cache key (`backend` is the compiler
    doing the work)."""

    def __init__(self, arch: str):
        self.arch = arch
        self.backend: Compiler
        if comgr_available(arch):
            self.backend = ComgrCompiler(arch)
        else:
            from ember.amd_runtime.clang_compiler import ClangCompiler
            self.backend = ClangCompiler(arch)
        self.flags = self.backend.flags
        super().__init__(self.backend.cachekey)

    def check_binary(self, lib: bytes) -> None:
        check_code_object(lib, self.arch)

    def compile(self, src: str) -> bytes:
        return self.backend.compile(src)
