"""Every kernel Ember makes renders for NVIDIA and AMD and compiles there: CUDA C++ to an sm_90 cubin with NVRTC
(no GPU needed), HIP to a gfx942 code object with clang-19.

The kernels are those of a sweep of the Tensor API (every op family of packages/tensor/tests, all dtypes, and a
training step of a 2-layer Llama) plus every kernel the test session built before this file ran: in a whole-suite
run (CI), that is every kernel of the tensor package's tests and of the trainer's. Each kernel gets the GPU
heuristic's opts (workgroups, grouped reduces). The kernels of one target compile as one source, a few batches."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from ember.codegen import CUDARenderer, HIPRenderer, OptOps, hand_coded_opts, to_program
from ember.tensor import Tensor, nn
from ember.tensor.engine import ENGINE
from ember.uops import dtypes

DTYPES = [dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.int32, dtypes.uint32, dtypes.int64,
          dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64]


def sweep() -> None:
    """Realize one of each op family on the CPU (the kernel ASTs do not depend on the device)."""
    rng = np.random.default_rng(0)
    x = Tensor(rng.standard_normal((9, 33)).astype(np.float32))
    y = Tensor(rng.standard_normal((33, 17)).astype(np.float32))
    outs = [x + 1, x * x - x / 3, x.exp(), x.log(), x.sqrt(), x.sin(), x.cos(), x.tanh(), x.sigmoid(), x.gelu(),
            x.relu(), x.abs(), x.maximum(0.5), x ** 2.5, x.trunc(), x.floor(), x.ceil(), x.round(), (x > 0).where(x, 1),
            x.sum(), x.sum(0), x.sum(1), x.max(1), x.min(0), x.mean(), x.std(1), x.argmax(1), x.cumsum(1),
            x.softmax(-1), x.log_softmax(-1), x @ y, x.T.contiguous(), x.reshape(3, 3, 33).permute(2, 0, 1) + 0,
            x.pad(((1, 2), (0, 3))), x[1:5, ::2] * 2, x.flip(0) + 0, x.expand(2, 9, 33) + 0, x.cat(x, dim=0),
            x[Tensor([0, 3, 8])], nn.LayerNorm(33)(x),
            nn.sparse_categorical_crossentropy(x, Tensor(rng.integers(0, 33, 9)))]
    for dt in DTYPES:
        t = Tensor(rng.integers(0, 5, (7, 12))).cast(dt)
        outs += [t + t, t * t, t.max(1), t.cast(dtypes.float32), (t < t.T.contiguous().reshape(7, 12))]
        if dt not in (dtypes.bool,):
            outs += [t.sum(0)]
        if dtypes.is_int(dt) and dt != dtypes.bool:
            outs += [t // 3, t % 3, t << 1, t >> 1, t & 6, t | 1, t ^ 5]
    for dt in (dtypes.bfloat16, dtypes.float16):  # tensor cores: mma.sync on NVIDIA, MFMA on AMD
        outs += [Tensor(rng.standard_normal((64, 128)).astype(np.float32)).cast(dt) @
                 Tensor(rng.standard_normal((128, 32)).astype(np.float32)).cast(dt)]
    # big enough for the GPU heuristic's register tile (matmul) and 16-byte vectors (elementwise)
    big_a = Tensor(rng.standard_normal((256, 64)).astype(np.float32))
    big_b = Tensor(rng.standard_normal((64, 256)).astype(np.float32))
    big = Tensor(rng.standard_normal((512, 512)).astype(np.float32))
    outs += [big_a @ big_b, big * 2 + big.exp2(), big.T + big]
    d = x.cast(dtypes.float64)
    outs += [d.exp(), d.log(), d.sin(), d ** 1.5, Tensor(rng.integers(-9, 9, (4, 5))) ** 3]
    img = Tensor(rng.standard_normal((2, 3, 10, 10)).astype(np.float32))
    outs += [nn.Conv2d(3, 4, 3, padding=1)(img), nn.max_pool2d(img), nn.avg_pool2d(img)]
    emb = nn.Embedding(50, 8)
    outs += [emb(Tensor([[1, 2, 3], [4, 5, 49]]))]
    emb.weight.requires_grad = True  # its gradient: the scheduler's scatter (CUDA: atomicAdd on a workgroup)
    emb(Tensor([[1, 2, 1], [4, 5, 49]])).sum().backward()
    outs += [emb.weight.grad]
    for o in outs:
        o.realize()


def tiny_llama_step() -> None:
    from ember.mlperf_llama.model import Llama, LlamaConfig

    model = Llama(LlamaConfig(dim=32, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=64, vocab_size=64, max_seq_len=16))
    loss = model.loss(Tensor(np.random.default_rng(1).integers(0, 64, (2, 9))))
    loss.backward()
    Tensor.realize(loss, *[p.grad for p in model.parameters() if p.grad is not None])


@pytest.fixture(scope="module")
def kernels():
    sweep()
    tiny_llama_step()
    asts = list(dict.fromkeys(ast for ast, _ in ENGINE.kernels))
    assert len(asts) >= 150
    assert sum(any(o.op is OptOps.TC for o in hand_coded_opts(a, CUDARenderer())) for a in asts) >= 2
    # (register tiles: two UPCASTs; vectors: one)
    assert sum(sum(o.op is OptOps.UPCAST for o in hand_coded_opts(a, CUDARenderer())) == 2 for a in asts) >= 1
    assert sum(sum(o.op is OptOps.UPCAST for o in hand_coded_opts(a, CUDARenderer())) == 1 for a in asts) >= 2
    assert any("atomicAdd(" in to_program(a, CUDARenderer()).src for a in asts)  # (a scatter)
    return asts


def compile_all(asts, renderer, compiler, batch: int = 400) -> int:
    """Render every AST for `renderer`, compile them `batch` at a time as one source; the number compiled."""
    srcs = []
    for i, ast in enumerate(asts):
        spec = to_program(ast, renderer)
        assert spec.src.count(f" {spec.name}(") == 1
        srcs.append(spec.src.replace(f" {spec.name}(", f" k{i}_{spec.name}("))
    for start in range(0, len(srcs), batch):
        lib = compiler.compile("\n".join(srcs[start:start + batch]))
        for i in range(start, min(start + batch, len(srcs))):
            assert f"k{i}_".encode() in lib, f"kernel {i} is missing from the compiled library"
    return len(srcs)


def test_every_kernel_compiles_with_nvrtc_for_sm_90(kernels):
    pytest.importorskip("nvidia", reason="the nvidia-cuda-nvrtc wheel (test dependency) provides NVRTC")
    from ember.cuda_runtime.compiler import NVRTCCompiler, cubin_arch

    compiler = NVRTCCompiler("sm_90")
    assert compile_all(kernels, CUDARenderer("sm_90"), compiler) == len(kernels)
    assert cubin_arch(compiler.compile(to_program(kernels[0], CUDARenderer("sm_90")).src)) == 90


@pytest.mark.skipif(shutil.which("clang-19") is None or shutil.which("ld.lld-19") is None,
                    reason="clang-19 and lld-19 (apt) build gfx942 code objects")
def test_every_kernel_compiles_with_clang_for_gfx942(kernels):
    from ember.amd_runtime.clang_compiler import ClangCompiler

    assert compile_all(kernels, HIPRenderer("gfx942"), ClangCompiler("gfx942")) == len(kernels)


def test_vectorized_kernels_run_on_the_amd_mock(monkeypatch):
    """The GPU heuristic's register-tiled matmul and 4-wide elementwise kernels, through HIPRenderer, clang-19 and the
    gfx942 interpreter of MOCKGPU=1 (its 16-byte loads are global_load_dwordx4), equal numpy."""
    if shutil.which("clang-19") is None or shutil.which("ld.lld-19") is None:
        pytest.skip("clang-19 and lld-19 (apt) build gfx942 code objects")
    from ember.runtime import Device

    monkeypatch.setenv("MOCKGPU", "1")
    monkeypatch.setattr(Device, "_instances", {})
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((256, 16)).astype(np.float32), rng.standard_normal((16, 256)).astype(np.float32)
    x = rng.standard_normal((512, 516)).astype(np.float32)
    got = (Tensor(a, device="AMD") @ Tensor(b, device="AMD")).numpy()
    np.testing.assert_allclose(got, a @ b, rtol=1e-5, atol=1e-5)
    y = Tensor(x, device="AMD")
    np.testing.assert_allclose((y * 2 + 1).numpy(), x * 2 + 1, rtol=1e-6)
    np.testing.assert_allclose((y[:, 1:513] + 1).numpy(), x[:, 1:513] + 1, rtol=1e-6)  # rows at unaligned addresses
    h, g = a.astype(np.float16), b.astype(np.float16)  # MFMA with 2 x 2 tiles per wavefront (big enough)
    got = (Tensor(h, device="AMD") @ Tensor(g, device="AMD")).numpy().astype(np.float32)
    np.testing.assert_allclose(got, h.astype(np.float32) @ g.astype(np.float32), rtol=1e-2, atol=1e-2)
