"""Kernels Ember itself makes (Tensor graph -> schedule -> HIPRenderer with the GPU heuristic's opts), compiled by
clang-19 for gfx942 and executed on the wave64 interpreter, against the same graph realized on the CPU device."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from ember.amd_runtime.elf import load_code_object
from ember.amd_runtime.mock.isa import KernelCode, Program, SparseMemory, run_dispatch

tensor = pytest.importorskip("ember.tensor")
CLANG = shutil.which("clang-19")
pytestmark = pytest.mark.skipif(CLANG is None, reason="clang-19 is needed to build gfx942 code objects")
BASE = 0x7F00_0000_0000


def run_rendered(out: object, inputs: list[object], tmp: Path) -> np.ndarray:
    """Run every kernel of `out`'s schedule on the interpreter; return `out`'s buffer."""
    from ember.codegen import HIPRenderer, to_program
    from ember.schedule import schedule
    from ember.uops import Ops, UOp, to_numpy_dtype

    sched = schedule(UOp.sink(out.uop))  # type: ignore[attr-defined]
    renderer = HIPRenderer("gfx942")
    specs = [to_program(it.ast, renderer) for it in sched.items]
    src = "\n".join(s.src.replace(f" {s.name}(", f" k{i}_{s.name}(") for i, s in enumerate(specs))
    hip, obj = tmp / "k.hip", tmp / "k.o"
    hip.write_text(src)
    subprocess.run([CLANG, "-x", "hip", "--offload-arch=gfx942", "--cuda-device-only", "--no-gpu-bundle-output",
                    "-nogpulib", "-nogpuinc", "-O3", "-c", str(hip), "-o", str(obj)], check=True)
    code = load_code_object(obj.read_bytes(), arch="gfx942")
    program = Program.from_code_object(code, BASE)
    mem = SparseMemory()
    addrs: dict[UOp, int] = {}
    def buffer_of(u: UOp) -> UOp:
        while u.op is not Ops.BUFFER:
            u = u.src[0]
        return u

    for t in inputs:
        data = np.ascontiguousarray(t.numpy())  # type: ignore[attr-defined]
        b = buffer_of(t.uop)  # type: ignore[attr-defined]
        addrs[b] = mem.alloc(max(data.nbytes, 4))
        mem.write_array(addrs[b], data)
    for i, (it, spec) in enumerate(zip(sched.items, specs)):
        assert not spec.vars, "symbolic kernels are not exercised here"
        for b in it.bufs:
            if b not in addrs:
                addrs[b] = mem.alloc(max(b.arg * b.dtype.itemsize, 4))
        kernarg = mem.alloc(8 * len(it.bufs) + 8)
        mem.write_array(kernarg, np.array([addrs[it.bufs[a.slot]] for a in spec.bufs], np.uint64))
        run_dispatch(program, KernelCode.from_code_object(code, f"k{i}_{spec.name}", BASE), memory=mem,
                     kernarg_addr=kernarg, grid=spec.global_size, grid_in="workgroups",
                     workgroup_size=spec.local_size or (1, 1, 1))
    res = buffer_of(sched.becomes[out.uop])  # type: ignore[attr-defined]
    dt = np.dtype(to_numpy_dtype(res.dtype))
    return mem.read_array(addrs[res], dt, res.arg).reshape(out.shape)  # type: ignore[attr-defined]


rng = np.random.default_rng(3)
X = rng.standard_normal((16, 40)).astype(np.float32)
Y = rng.standard_normal((40, 24)).astype(np.float32)
INTS = rng.integers(-1000, 1000, (8, 33)).astype(np.int32)

CASES: dict[str, tuple[Callable[..., object], list[np.ndarray], float]] = {
    "elementwise": (lambda x: (x * 3 + 1).exp2() / (x.abs() + 1).sqrt() - x.sin(), [X], 1e-5),
    "log_and_compare": (lambda x: ((x > 0).where(x, -x) + 1e-3).log() * x.maximum(0.25), [X], 1e-5),
    "sum_max_axes": (lambda x: x.sum(1) + x.max(1) * 2, [X], 1e-5),
    "softmax": (lambda x: x.softmax(-1), [X], 1e-5),
    "matmul": (lambda x, y: x @ y, [X, Y], 1e-5),
    "mean_all": (lambda x: x.mean() + x.std(), [X], 1e-5),
    "int_div_mod_shift": (lambda i: (i // 7) * 3 + (i % 5) + (i << 2) - (i >> 1) + (i & 6), [INTS], 0),
    "half_cast": (lambda x: (x.cast(tensor.dtypes.float16) * 3 + 1).cast(tensor.dtypes.float32), [X], 1e-3),
    "int64_cumsum": (lambda i: i.cast(tensor.dtypes.int64).cumsum(1) * 100000, [INTS], 0),
    "bf16_roundtrip": (lambda x: (x.cast(tensor.dtypes.bfloat16) + 1).cast(tensor.dtypes.float32), [X], 0),
    "f64_math": (lambda x: x.cast(tensor.dtypes.float64).exp() + x.cast(tensor.dtypes.float64).abs().log(), [X], 1e-12),
    "argmax_gather_pad": (lambda x: x.argmax(1).cast(tensor.dtypes.float32) + x.pad(((1, 1), (0, 2)))[1:17, 3:5].sum(1),
                          [X], 1e-5),
    "layernorm_gelu": (lambda x: ((x - x.mean(1, keepdim=True)) / (x.var(1, keepdim=True) + 1e-5).sqrt()).gelu(),
                       [X], 1e-5),
    "batched_matmul_relu": (lambda a, b: (a @ b).relu().sum(0), [rng.standard_normal((3, 12, 20)).astype(np.float32),
                                                                  rng.standard_normal((3, 20, 9)).astype(np.float32)],
                            1e-5),
}


@pytest.mark.parametrize("name", list(CASES))
def test_rendered_kernel_matches_cpu(name: str, tmp_path: Path) -> None:
    fn, arrays, rtol = CASES[name]
    inputs = [tensor.Tensor(a).realize() for a in arrays]
    out = fn(*inputs)
    got = run_rendered(out, inputs, tmp_path)
    ref = fn(*[tensor.Tensor(a) for a in arrays]).numpy()
    if rtol:
        np.testing.assert_allclose(got, ref, rtol=rtol, atol=rtol)
    else:
        np.testing.assert_array_equal(got, ref)


def sweep_expressions(rng: np.random.Generator) -> list[object]:
    """One of each op family (as tests/test_gpu_kernels.py sweeps them), realized on the CPU device."""
    t, dt = tensor.Tensor, tensor.dtypes
    x = t(rng.standard_normal((9, 33)).astype(np.float32))
    y = t(rng.standard_normal((33, 17)).astype(np.float32))
    outs = [x + 1, x * x - x / 3, x.exp(), x.log(), x.sqrt(), x.sin(), x.cos(), x.tanh(), x.sigmoid(), x.gelu(),
            x.relu(), x.abs(), x.maximum(0.5), x ** 2.5, x.trunc(), x.floor(), x.ceil(), x.round(),
            (x > 0).where(x, 1), x.sum(), x.sum(0), x.max(1), x.min(0), x.std(1), x.argmax(1), x.cumsum(1),
            x.log_softmax(-1), x @ y, x.T.contiguous(), x.pad(((1, 2), (0, 3))), x[1:5, ::2] * 2, x.flip(0) + 0,
            x.cat(x, dim=0), x[t([0, 3, 8])], x.cast(dt.float16) @ y.cast(dt.float16)]
    for d in (dt.int8, dt.uint8, dt.int16, dt.int32, dt.uint32, dt.int64, dt.float16, dt.float64):
        v = t(rng.integers(0, 5, (7, 12))).cast(d)
        outs += [v + v, v * v, v.max(1), v.sum(0), v.cast(dt.float32)]
        if d not in (dt.float16, dt.float64):
            outs += [v // 3, v % 3, v << 1, v >> 1, v ^ 5]
    return outs


@pytest.mark.slow
def test_every_sweep_kernel_matches_the_cpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every kernel of an op sweep, with random inputs, on the interpreter and on the CPU device."""
    from ember.codegen import HIPRenderer, to_program
    from ember.runtime import Buffer
    from ember.tensor.engine import ENGINE, get_kernel
    from ember.uops import dtypes, to_numpy_dtype

    rng = np.random.default_rng(0)
    # an empty kernel table for the sweep: every kernel it makes lands there, even one an earlier test already built
    monkeypatch.setattr(ENGINE, "kernels", {})
    for o in sweep_expressions(rng):
        o.realize()  # type: ignore[attr-defined]
    asts = list(dict.fromkeys(ast for ast, _ in ENGINE.kernels))
    specs = [to_program(a, HIPRenderer("gfx942")) for a in asts]
    src = "\n".join(s.src.replace(f" {s.name}(", f" k{i}_{s.name}(") for i, s in enumerate(specs))
    (tmp_path / "all.hip").write_text(src)
    subprocess.run([CLANG, "-x", "hip", "--offload-arch=gfx942", "--cuda-device-only", "--no-gpu-bundle-output",
                    "-nogpulib", "-nogpuinc", "-O3", "-c", str(tmp_path / "all.hip"), "-o", str(tmp_path / "all.o")],
                   check=True)
    code = load_code_object((tmp_path / "all.o").read_bytes(), arch="gfx942")
    program = Program.from_code_object(code, BASE)
    checked = 0
    for i, (ast, spec) in enumerate(zip(asts, specs)):
        if spec.vars or any(a.dtype == dtypes.bfloat16 for a in spec.bufs):
            continue
        arrays = []
        for a in spec.bufs:
            npdt = np.dtype(to_numpy_dtype(a.dtype))
            arr = (np.zeros(a.size, npdt) if a.written else rng.standard_normal(a.size).astype(npdt)
                   if npdt.kind == "f" else rng.integers(0, 3, a.size).astype(npdt))
            arrays.append(arr)
        bufs = [Buffer("CPU", a.size, a.dtype).allocate().copyin(x.copy()) for a, x in zip(spec.bufs, arrays)]
        get_kernel(ast, "CPU")(bufs, wait=True)
        mem = SparseMemory()
        addrs = []
        for x in arrays:
            addrs.append(mem.alloc(max(x.nbytes, 4)))
            mem.write_array(addrs[-1], x)
        kernarg = mem.alloc(8 * len(addrs) + 8)
        mem.write_array(kernarg, np.array(addrs, np.uint64))
        run_dispatch(program, KernelCode.from_code_object(code, f"k{i}_{spec.name}", BASE), memory=mem,
                     kernarg_addr=kernarg, grid=spec.global_size, grid_in="workgroups",
                     workgroup_size=spec.local_size or (1, 1, 1))
        for a, x, b, addr in zip(spec.bufs, arrays, bufs, addrs):
            if a.written:
                got, ref = mem.read_array(addr, x.dtype, a.size), b.numpy()
                # float16: the CPU rounds to f16 after every op, MFMA sums in f32: a reduce's results differ by a
                # few last bits of its largest terms, so the bound scales with the output (1e-2 of its largest value)
                scale = float(np.abs(ref.astype(np.float64)).max(initial=1.0))
                rtol, atol = (1e-2, 1e-2 * scale) if x.dtype == np.float16 else (1e-5, 1e-5)
                np.testing.assert_allclose(got.astype(np.float64), ref.astype(np.float64), rtol=rtol, atol=atol,
                                           err_msg=spec.name)
        checked += 1
    assert checked >= 60
