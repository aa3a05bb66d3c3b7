"""`ClangCompiler`: HIP source to an AMDGPU code object with the LLVM tools, no ROCm (the fallback of HIPCompiler).

Two subprocesses in a temporary folder:

    clang -x hip --offload-arch=<arch> --cuda-device-only -nogpulib -nogpuinc -fgpu-rdc -O3 -c kernel.hip -o k.bc
    ld.lld -shared --no-undefined -plugin-opt=mcpu=<arch> -plugin-opt=O3 -plugin-opt=-amdgpu-internalize-symbols \
        k.bc -o kernel.hsaco

`-fgpu-rdc` leaves LLVM bitcode, which ld.lld compiles (LTO) for `-plugin-opt=mcpu` (without it the code object's
e_flags name no processor). Without -fgpu-rdc, `clang -c` already links a shared object itself, and a second
`ld.lld -shared` over it would produce an empty library that merely depends on it. The output is checked with
`elf.load_code_object(lib, arch)`.

gfx942 needs clang >= 19 and gfx950 clang >= 20 (clang-19 rejects the target); the newest `clang-N`/`ld.lld-N` pair
on PATH that is new enough is used (the un-suffixed `clang`/`ld.lld` too), unless `clang=`/`lld=` name them.
"""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from ember.amd_runtime import elf
from ember.runtime import CompileError, Compiler

# the oldest LLVM major that knows each target
MIN_LLVM = {"gfx942": 19, "gfx950": 20}
_CANDIDATE_MAJORS = range(30, 18, -1)


@functools.cache
def llvm_major(tool: str) -> int | None:
    """The LLVM major version of `tool` (`clang --version`), None when it does not run."""
    try:
        out = subprocess.run([tool, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"(?:clang|LLD) version (\d+)", out.stdout)
    return int(m.group(1)) if out.returncode == 0 and m else None


def find_toolchain(arch: str) -> tuple[str, str]:
    """The (clang, ld.lld) pair for `arch`: the newest suffixed pair on PATH whose major is new enough, else the
    un-suffixed tools. Raises FileNotFoundError when none is new enough, naming the version `arch` needs."""
    need = MIN_LLVM.get(_base_arch(arch))
    if need is None:
        raise ValueError(f"clang: arch {arch!r} is not supported; accepted: {sorted(MIN_LLVM)}")
    found: list[str] = []
    for clang, lld in [(f"clang-{m}", f"ld.lld-{m}") for m in _CANDIDATE_MAJORS] + [("clang", "ld.lld")]:
        if shutil.which(clang) is None or shutil.which(lld) is None:
            continue
        major = llvm_major(clang)
        found.append(f"{clang} ({major})")
        if major is not None and major >= need:
            return clang, lld
    raise FileNotFoundError(f"clang: {arch} needs clang and ld.lld of LLVM >= {need}; found "
                            f"{', '.join(found) or 'no clang-N/ld.lld-N pair on PATH'}"
                            + (" (gfx950 is not a target of LLVM 19: install LLVM 20 or later, or ROCm's comgr)"
                               if need >= 20 else ""))


def _base_arch(arch: str) -> str:
    return arch.split(":")[0]


class ClangCompiler(Compiler):
    """HIP source to a code object for `arch` through clang + ld.lld; cached on disk by the tools' version."""

    flags = ("-x", "hip", "--cuda-device-only", "-nogpulib", "-nogpuinc", "-fgpu-rdc", "-O3")
    lld_flags = ("-shared", "--no-undefined", "-plugin-opt=O3", "-plugin-opt=-amdgpu-internalize-symbols")

    def __init__(self, arch: str, clang: str | None = None, lld: str | None = None):
        self.arch = arch
        if clang is None or lld is None:
            found_clang, found_lld = find_toolchain(arch)
            clang, lld = clang or found_clang, lld or found_lld
        major = llvm_major(clang)
        need = MIN_LLVM.get(_base_arch(arch), 0)
        if major is None or major < need:
            raise FileNotFoundError(f"clang: {arch} needs LLVM >= {need}, but {clang} is "
                                    f"{'not runnable' if major is None else f'LLVM {major}'}")
        self.clang, self.lld = clang, lld
        super().__init__(f"hip clang {major} {clang} {lld} {arch}")

    def check_binary(self, lib: bytes) -> None:
        """A cached code object must be an AMDGPU one for this arch (e_machine EM_AMDGPU), as `compile` checks."""
        elf.load_code_object(lib, _base_arch(self.arch))

    def compile(self, src: str) -> bytes:
        base = _base_arch(self.arch)
        with tempfile.TemporaryDirectory(prefix="ember-hip-") as tmp:
            (Path(tmp) / "kernel.hip").write_text(src)
            steps = ([self.clang, *self.flags, f"--offload-arch={self.arch}", "-c", "kernel.hip", "-o", "kernel.bc"],
                     [self.lld, *self.lld_flags, f"-plugin-opt=mcpu={base}", "kernel.bc", "-o", "kernel.hsaco"])
            for cmd in steps:
                try:
                    proc = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True)
                except FileNotFoundError:
                    raise CompileError(f"clang: {cmd[0]!r} was not found") from None
                if proc.returncode != 0:
                    raise CompileError(f"clang: `{' '.join(cmd)}` failed with exit code {proc.returncode}:\n"
                                       f"{proc.stderr}{proc.stdout}\n--- source ---\n{src}")
            lib = (Path(tmp) / "kernel.hsaco").read_bytes()
        try:
            elf.load_code_object(lib, base)
        except ValueError as e:
            raise CompileError(f"clang: the output of {self.clang}/{self.lld} for {self.arch} is not a usable code "
                               f"object: {e}") from None
        return lib
