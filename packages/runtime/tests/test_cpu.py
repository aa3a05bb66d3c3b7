import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from ember.codegen import Opt, OptOps, to_program
from ember.runtime import Buffer, CompileError, Device
from ember.runtime.cpu import WAIT_POLICY, CPUCompiler, cpu_threads, openmp_environment
from ember.uops import AxisType, Ops, UOp, dtypes
from ember.uops.settings import Context, usable_cores

ADD_SRC = """
void add(float* restrict data0, const float* restrict data1, const float* restrict data2, long long n) {
  #pragma omp parallel for
  for (long long i = 0; i < n; i++) data0[i] = data1[i] + data2[i];
}
"""

THREADS_SRC = """
#include <omp.h>
void threads(int* restrict data0) {
  data0[0] = omp_get_max_threads();
  #pragma omp parallel
  {
    #pragma omp single
    data0[1] = omp_get_num_threads();
  }
}
"""


def run_c(src, name, *bufs, vals=(), wait=False):
    dev = Device["CPU"]
    return dev.runtime(name, dev.compiler.compile_cached(src))(*bufs, vals=vals, wait=wait)


@pytest.mark.parametrize("n", [1, 1000, 100_003])
def test_openmp_kernel_on_buffers_matches_numpy(rng, n):
    a, b = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    out = Buffer("CPU", n, dtypes.float32)
    bufs = (out, Buffer("CPU", n, dtypes.float32).copyin(a), Buffer("CPU", n, dtypes.float32).copyin(b))
    seconds = run_c(ADD_SRC, "add", *bufs, vals=(n,), wait=True)
    assert isinstance(seconds, float) and seconds > 0
    np.testing.assert_array_equal(out.numpy(), a + b)  # one IEEE add per element: exact
    assert run_c(ADD_SRC, "add", *bufs, vals=(n,)) is None


def test_kernel_on_views():
    base = Buffer("CPU", 8, dtypes.float32).copyin(np.arange(8, dtype=np.float32))
    out = base.view(2, dtypes.float32, offset=0)
    run_c(ADD_SRC, "add", out, base.view(2, dtypes.float32, offset=16), base.view(2, dtypes.float32, offset=24),
          vals=(2,))
    np.testing.assert_array_equal(base.numpy(), [4 + 6, 5 + 7, 2, 3, 4, 5, 6, 7])


def _fresh_process(script, **env_vars):
    # libgomp reads its variables when it loads: each setting gets a fresh process, without the OpenMP variables of
    # this one
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMP_", "GOMP_"))}
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    res = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], env={**env, **env_vars}, capture_output=True,
                         text=True)
    assert res.returncode == 0, res.stderr
    return res


@pytest.mark.parametrize("omp_num_threads", [None, "3"])
def test_thread_count_defaults_to_usable_cores_and_follows_omp_num_threads(omp_num_threads):
    res = _fresh_process(f"""
        from ember.runtime import Buffer, Device
        from ember.uops import dtypes
        dev, out = Device["CPU"], Buffer("CPU", 2, dtypes.int32)
        dev.runtime("threads", dev.compiler.compile_cached({THREADS_SRC!r}))(out)
        print(dev.threads, dev.renderer.max_threads, *out.numpy().tolist())
    """, **({"OMP_NUM_THREADS": omp_num_threads} if omp_num_threads else {}))
    want = omp_num_threads or str(usable_cores())
    # the device, the renderer's num_threads() and libgomp (max threads, team size) agree
    assert res.stdout.split() == [want] * 4, res.stderr


def test_thread_count_follows_the_affinity():
    # a process allowed one core (as `taskset -c 0` starts it) runs its kernels on one thread
    res = _fresh_process(f"""
        import os
        os.sched_setaffinity(0, {{min(os.sched_getaffinity(0))}})
        from ember.runtime import Buffer, Device
        from ember.uops import dtypes
        dev, out = Device["CPU"], Buffer("CPU", 2, dtypes.int32)
        dev.runtime("threads", dev.compiler.compile_cached({THREADS_SRC!r}))(out)
        print(dev.threads, dev.renderer.max_threads, *out.numpy().tolist())
    """)
    assert res.stdout.split() == ["1"] * 4


LIBGOMP_SETTINGS = """
    from ember.runtime import Buffer, Device
    from ember.uops import dtypes
    dev, out = Device["CPU"], Buffer("CPU", 2, dtypes.int32)
    print(sorted(dev.openmp_env.items()), dev.openmp_preloaded)
    dev.runtime("threads", dev.compiler.compile_cached({src!r}))(out)   # loads libgomp, which prints what it read
"""


def _libgomp_display(stderr):
    # OMP_DISPLAY_ENV=verbose: libgomp prints its settings as it loads, "  NAME = 'VALUE'" per line
    return dict(re.findall(r"^\s+([A-Z_]+) = '([^']*)'", stderr, re.M))


@pytest.mark.parametrize("user_env, ours, policy, spin_count", [
    ({}, {"OMP_WAIT_POLICY": "passive", "OMP_NUM_THREADS": "cores"}, "PASSIVE", "0"),  # by default: no spin
    ({"OMP_WAIT_POLICY": "active"}, {"OMP_NUM_THREADS": "cores"}, "ACTIVE", "30000000000"),  # libgomp's for active
    ({"OMP_WAIT_POLICY": "PASSIVE", "OMP_NUM_THREADS": "1"}, {}, "PASSIVE", "0"),
    ({"GOMP_SPINCOUNT": "1234"}, {"OMP_NUM_THREADS": "cores"}, None, "1234"),  # the user's spin, no policy of ours
])
def test_libgomp_reads_the_settings_the_device_chose(user_env, ours, policy, spin_count):
    ours = {k: str(usable_cores()) if v == "cores" else v for k, v in ours.items()}
    res = _fresh_process(LIBGOMP_SETTINGS.format(src=THREADS_SRC), OMP_DISPLAY_ENV="verbose", **user_env)
    assert res.stdout.split("\n")[0] == f"{sorted(ours.items())} False"
    shown = _libgomp_display(res.stderr)
    assert shown["GOMP_SPINCOUNT"] == spin_count, res.stderr
    if policy is not None:
        assert shown["OMP_WAIT_POLICY"] == policy, res.stderr
    assert shown["OMP_NUM_THREADS"] == user_env.get("OMP_NUM_THREADS", ours.get("OMP_NUM_THREADS")), res.stderr


def test_openmp_environment_keeps_what_the_user_set(monkeypatch):
    for name in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT"):
        monkeypatch.delenv(name, raising=False)
    assert openmp_environment() == {"OMP_NUM_THREADS": str(cpu_threads()), "OMP_WAIT_POLICY": WAIT_POLICY}
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert openmp_environment() == {"OMP_WAIT_POLICY": WAIT_POLICY}
    monkeypatch.setenv("OMP_WAIT_POLICY", "Active")
    assert openmp_environment() == {}
    monkeypatch.delenv("OMP_WAIT_POLICY")
    monkeypatch.setenv("GOMP_SPINCOUNT", "infinite")
    assert openmp_environment() == {}
    with Context(OMP_WAIT_POLICY="active"):  # a Context's policy goes into the environment libgomp reads
        assert openmp_environment() == {"OMP_WAIT_POLICY": "active"}
    monkeypatch.setenv("OMP_WAIT_POLICY", "sometimes")
    with pytest.raises(ValueError, match="OMP_WAIT_POLICY='sometimes'"):
        openmp_environment()


def test_libgomp_loaded_before_the_device_is_reported():
    # libgomp (here the system's, as PyTorch's copy would be) loaded before the device: its settings are already read
    res = _fresh_process("""
        import ctypes
        ctypes.CDLL("libgomp.so.1")
        from ember.runtime import Device
        print(Device["CPU"].openmp_preloaded)
    """)
    assert res.stdout.split() == ["True"]


def test_cpu_threads_in_process():
    out = Buffer("CPU", 2, dtypes.int32)
    run_c(THREADS_SRC, "threads", out)
    assert out.numpy().tolist() == [cpu_threads(), cpu_threads()] == [Device["CPU"].threads] * 2


def test_syntax_error_raises_with_stderr_and_source():
    src = "void broken(float* restrict data0) { data0[0] = 1.0f }\n"
    with pytest.raises(RuntimeError) as e:
        Device["CPU"].compiler.compile(src)
    assert isinstance(e.value, CompileError)
    msg = str(e.value)
    assert "error" in msg and "kernel.c:1" in msg  # the compiler's diagnostic
    assert src in msg


def test_a_failed_compile_is_not_cached():
    src = "this is not C\n"
    for _ in range(2):
        with pytest.raises(CompileError):
            Device["CPU"].compiler.compile_cached(src)
    assert not Device["CPU"].compiler.cache_path(src).exists()


def test_missing_function_and_missing_compiler(monkeypatch):
    lib = Device["CPU"].compiler.compile_cached(ADD_SRC)
    with pytest.raises(RuntimeError, match="has no function 'sub'"):
        Device["CPU"].runtime("sub", lib)
    monkeypatch.setenv("CC", "/nonexistent/cc")
    with pytest.raises(CompileError, match="'/nonexistent/cc' was not found"):
        CPUCompiler().compile(ADD_SRC)


def test_cc_from_the_environment_with_arguments(monkeypatch):
    monkeypatch.setenv("CC", "")  # empty: the default
    assert CPUCompiler().cc == ("cc",)
    monkeypatch.setenv("CC", "cc -DANSWER=41")
    comp = CPUCompiler()
    assert comp.cc == ("cc", "-DANSWER=41") and "-DANSWER=41" in comp.cachekey
    lib = comp.compile("int answer(int* restrict data0) { data0[0] = ANSWER + 1; return 0; }\n")
    out = Buffer("CPU", 1, dtypes.int32)
    Device["CPU"].runtime("answer", lib)(out)
    assert out.numpy()[0] == 42


def test_argument_errors():
    prg = Device["CPU"].runtime("add", Device["CPU"].compiler.compile_cached(ADD_SRC))
    with pytest.raises(ValueError, match="buffer argument 0 is on PYTHON, the program on CPU"):
        prg(Buffer("PYTHON", 1, dtypes.float32), vals=(0,))
    with pytest.raises(TypeError, match="buffer argument 0 must be a Buffer, got ndarray"):
        prg(np.zeros(1, np.float32), vals=(0,))
    with pytest.raises(TypeError, match="vals must be ints"):
        prg(vals=(1.5,))


def test_cpu_1_buffers_run_on_cpu_programs():
    out, a = Buffer("CPU:1", 3, dtypes.float32), Buffer("CPU:1", 3, dtypes.float32).copyin(np.ones(3, np.float32))
    run_c(ADD_SRC, "add", out, a, a, vals=(3,))
    np.testing.assert_array_equal(out.numpy(), [2, 2, 2])


# *** the C renderer's output runs on the CPU device and agrees with the PYTHON reference ***
def param(slot, n, dt=dtypes.float32):
    return UOp(Ops.PARAM, dt.ptr(n), (), slot)


def matvec_ast(n, m):
    r0, r1 = UOp.range(n, 0, AxisType.GLOBAL), UOp.range(m, 1, AxisType.REDUCE)
    val = param(1, n * m).index(r0 * m + r1).load() * param(2, m).index(r1).load()
    return UOp.sink(param(0, n).index(r0).store(UOp(Ops.REDUCE, dtypes.float32, (val, r1), Ops.ADD)).end(r0))


@pytest.mark.parametrize("opts", [None, [], [Opt(OptOps.THREAD, 0, 2)], [Opt(OptOps.UPCAST, 0, 4)],
                                  [Opt(OptOps.UNROLL, 1, 4)]])
def test_rendered_matvec_on_cpu_and_python(rng, opts):
    n, m = 8, 12
    a, b = rng.standard_normal((n, m), dtype=np.float32), rng.standard_normal(m, dtype=np.float32)
    results = {}
    for device in ("CPU", "PYTHON"):
        dev = Device[device]
        spec = to_program(matvec_ast(n, m), dev.renderer, opts)
        out = Buffer(device, n, dtypes.float32)
        prg = dev.runtime(spec.function, dev.compiler.compile_cached(spec.src))
        prg(out, Buffer(device, n * m, dtypes.float32).copyin(a), Buffer(device, m, dtypes.float32).copyin(b),
            global_size=spec.global_size, local_size=spec.local_size)
        results[device] = out.numpy()
    np.testing.assert_allclose(results["CPU"], a @ b, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(results["PYTHON"], a @ b, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(results["CPU"], results["PYTHON"], rtol=1e-6, atol=1e-6)


def test_big_buffers_ask_for_huge_pages(monkeypatch):
    from ember.runtime import cpu

    calls = []
    monkeypatch.setattr(cpu, "_madvise", lambda: lambda addr, n, advice: calls.append((addr, n, advice)))
    alloc = cpu.CPUAllocator()
    small, big = alloc._alloc(cpu.HUGE_PAGE_MIN - 64, None), alloc._alloc(cpu.HUGE_PAGE_MIN + (1 << 20) + 4, None)
    try:
        assert small.addr % cpu.ALIGNMENT == 0 and big.addr % cpu.HUGE_PAGE == 0
        # only the big one, over its whole 2 MiB pages
        assert [c for c in calls if c[2] == cpu.MADV_HUGEPAGE] == [(big.addr, cpu.HUGE_PAGE_MIN, cpu.MADV_HUGEPAGE)]
        big.numpy()[:] = 7  # the memory is ordinary memory
        assert big.numpy()[-1] == 7
    finally:
        alloc._free(small, small.nbytes, None)
        alloc._free(big, big.nbytes, None)


def test_fresh_blocks_of_a_mib_or_more_are_faulted_in_the_background(monkeypatch):
    import threading
    import time

    from ember.runtime import cpu

    calls = []
    monkeypatch.setattr(cpu, "_madvise", lambda: lambda addr, n, advice: calls.append(
        (addr, n, advice, threading.current_thread().name)))
    for _ in range(500):  # (blocks of earlier tests may still be queued)
        if cpu._prefaulter.blocks.empty():
            break
        time.sleep(0.01)
    time.sleep(0.05)
    calls.clear()
    alloc = cpu.CPUAllocator()
    small, big = alloc._alloc(cpu.PREFAULT_MIN - 64, None), alloc._alloc(3 * cpu.PREFAULT_MIN + 100, None)
    try:
        want = (-(-big.addr // cpu.PAGE) * cpu.PAGE, (big.addr + big.nbytes) // cpu.PAGE * cpu.PAGE)
        for _ in range(1000):
            if calls:
                break
            time.sleep(0.01)
        # the big block's whole pages, on the prefault thread, not the caller's; nothing for the small one
        assert calls == [(want[0], want[1] - want[0], cpu.MADV_POPULATE_WRITE, "ember-prefault")]
        big.numpy()[:] = 3  # the memory is ordinary memory
        assert big.numpy()[-1] == 3
    finally:
        alloc._free(small, small.nbytes, None)
        alloc._free(big, big.nbytes, None)


def test_a_burst_of_blocks_is_faulted_in_after_the_burst(monkeypatch):
    # populating while the blocks were still being allocated made the allocations wait on it (the warm first step:
    # 50-90 ms of its 120 allocations): the prefault thread starts once no block came for PREFAULT_QUIET_S
    import threading
    import time

    from ember.runtime import cpu

    calls = []
    monkeypatch.setattr(cpu, "_madvise", lambda: lambda addr, n, advice: calls.append(
        (addr, n, advice, threading.current_thread().name)))
    for _ in range(500):  # (blocks of earlier tests may still be queued)
        if cpu._prefaulter.blocks.empty():
            break
        time.sleep(0.01)
    time.sleep(0.05)
    calls.clear()
    monkeypatch.setattr(cpu, "PREFAULT_QUIET_S", 0.5)
    alloc = cpu.CPUAllocator()
    blocks = []
    try:
        for i in range(3):
            blocks.append(alloc._alloc((i + 1) * cpu.PREFAULT_MIN, None))
            time.sleep(0.05)  # (a burst: each block well within the quiet time of the last)
        assert calls == [], calls  # nothing populated while blocks keep coming
        for _ in range(1000):
            if len(calls) == 3:
                break
            time.sleep(0.01)
        want = [(-(-b.addr // cpu.PAGE) * cpu.PAGE, (b.addr + b.nbytes) // cpu.PAGE * cpu.PAGE) for b in blocks]
        assert calls == [(lo, hi - lo, cpu.MADV_POPULATE_WRITE, "ember-prefault") for lo, hi in want]
    finally:
        for b in blocks:
            alloc._free(b, b.nbytes, None)


def test_float16_round_trips_survive_the_c_compiler():
    # a float16 value kept as float must be rounded where the kernel casts it: gcc 12's vectorizer dropped
    # (float)(_Float16)x on AVX512-FP16 CPUs (the compiler then gets -mno-avx512fp16); the elements are x[:i+1] summed
    body = "".join(f"  acc += (float)((_Float16)x[{i}]);\n  out[{i}] = (float)((_Float16)(acc{' + 0.0f' * (8 - i)}));\n"
                   for i in range(8))  # (a cumsum's unrolled kernel: straight-line code that the SLP vectorizes)
    src = f"void round_trips(float* restrict out, const float* restrict x) {{\n  float acc = 0.0f;\n{body}}}\n"
    lib = CPUCompiler().compile(src)
    prg = Device["CPU"].runtime("round_trips", lib)
    x = np.random.default_rng(0).random(8).astype(np.float32)
    out, inp = Buffer("CPU", 8, dtypes.float32), Buffer("CPU", 8, dtypes.float32)
    inp.copyin(memoryview(x))
    prg(out, inp, global_size=(1, 1, 1), wait=True)
    got = np.frombuffer(out.copyout(memoryview(bytearray(32))), np.float32)
    want = np.cumsum(x.astype(np.float16).astype(np.float32)).astype(np.float16).astype(np.float32)
    np.testing.assert_array_equal(got, want)


def test_avx512_fp16_hosts_compile_without_native_half(monkeypatch):
    from ember.runtime import cpu
    monkeypatch.setattr(cpu, "_cpuinfo", lambda: {"flags": "fpu sse2 avx512f avx512_fp16"})
    assert "-mno-avx512fp16" in CPUCompiler().flags
    monkeypatch.setattr(cpu, "_cpuinfo", lambda: {"flags": "fpu sse2 avx512f f16c"})
    assert "-mno-avx512fp16" not in CPUCompiler().flags
