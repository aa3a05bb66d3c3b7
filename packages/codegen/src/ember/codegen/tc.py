"""Tensor cores: the matrix instructions the TC opt (opt.py) lowers a matmul tile to, as `Ops.WMMA` UOps.

A `TensorCore` computes D (m x n, dtype_out) = A (m x k) @ B (k x n) + C with `threads` lanes of a warp (NVIDIA:
32) or wavefront (AMD: 64) working together; each lane holds `elements` = (a, b, c) values of A, B and C/D in
registers, and `a_at(lane, e)` / `b_at` / `c_at` say which (row, column) of its matrix element e of a lane is. The
layouts are the vendors' (../shared/specs/cuda.md §4.2 for mma.sync m16n8k16; the CDNA3 MFMA 16x16x16 layout for
gfx942), written once here for the codegen that builds the fragments and for `wmma_reference`, which the PYTHON
device runs and the tests compare against. They work on ints and on UOps alike (lane // 4, lane % 16, ...).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ember.uops import DType, dtypes

Layout = Callable[[Any, int], tuple[Any, Any]]


@dataclass(frozen=True)
class TensorCore:
    """One matrix instruction: its name (the WMMA UOp's arg), shape (m, n, k), lanes, dtypes and fragment layouts."""

    name: str
    dims: tuple[int, int, int]  # (m, n, k)
    threads: int
    dtype_in: DType
    dtype_out: DType
    elements: tuple[int, int, int]  # per lane: of A, of B, of C/D
    a_at: Layout  # (lane, e) -> (row m, col k)
    b_at: Layout  # (lane, e) -> (row k, col n)
    c_at: Layout  # (lane, e) -> (row m, col n)


# mma.sync.aligned.m16n8k16.row.col: lane = 4 g + t; pairs of consecutive k (A, B) or n (C) per register
def _mma_a(lane: Any, e: int) -> tuple[Any, Any]:
    return lane // 4 + 8 * (e >> 1 & 1), lane % 4 * 2 + (e & 1) + 8 * (e >> 2)


def _mma_b(lane: Any, e: int) -> tuple[Any, Any]:
    return lane % 4 * 2 + (e & 1) + 8 * (e >> 1), lane // 4


def _mma_c(lane: Any, e: int) -> tuple[Any, Any]:
    return lane // 4 + 8 * (e >> 1), lane % 4 * 2 + (e & 1)


# v_mfma_f32_16x16x16{bf16_1k,f16} (wave64): lane = 16 q + i; A row i, B and D column i; k (A, B) or m (D) = 4 q + e
def _mfma_a(lane: Any, e: int) -> tuple[Any, Any]:
    return lane % 16, lane // 16 * 4 + e


def _mfma_bc(lane: Any, e: int) -> tuple[Any, Any]:
    return lane // 16 * 4 + e, lane % 16


TENSOR_CORES: tuple[TensorCore, ...] = (
    TensorCore("mma_m16n8k16_bf16", (16, 8, 16), 32, dtypes.bfloat16, dtypes.float32, (8, 4, 4), _mma_a, _mma_b,
               _mma_c),
    TensorCore("mma_m16n8k16_f16", (16, 8, 16), 32, dtypes.float16, dtypes.float32, (8, 4, 4), _mma_a, _mma_b, _mma_c),
    TensorCore("mfma_16x16x16_bf16", (16, 16, 16), 64, dtypes.bfloat16, dtypes.float32, (4, 4, 4), _mfma_a, _mfma_bc,
               _mfma_bc),
    TensorCore("mfma_16x16x16_f16", (16, 16, 16), 64, dtypes.float16, dtypes.float32, (4, 4, 4), _mfma_a, _mfma_bc,
               _mfma_bc),
)
BY_NAME = {tc.name: tc for tc in TENSOR_CORES}


def wmma_reference(tc: TensorCore, a: Sequence[Sequence[float]], b: Sequence[Sequence[float]],
                   c: Sequence[Sequence[float]]) -> list[list[float]]:
    """What the instruction computes: each lane's (a, b, c) fragments in, each lane's d fragment out (lists per lane).
    The products are summed in float64 and rounded once (hardware rounds per step: a tolerance covers the order)."""
    m, n, k = tc.dims
    A = [[0.0] * k for _ in range(m)]
    B = [[0.0] * n for _ in range(k)]
    C = [[0.0] * n for _ in range(m)]
    for lane in range(tc.threads):
        for e in range(tc.elements[0]):
            i, j = tc.a_at(lane, e)
            A[i][j] = float(a[lane][e])
        for e in range(tc.elements[1]):
            i, j = tc.b_at(lane, e)
            B[i][j] = float(b[lane][e])
        for e in range(tc.elements[2]):
            i, j = tc.c_at(lane, e)
            C[i][j] = float(c[lane][e])
    D = [[C[i][j] + sum(A[i][x] * B[x][j] for x in range(k)) for j in range(n)] for i in range(m)]
    return [[D[i][j] for i, j in (tc.c_at(lane, e) for e in range(tc.elements[2]))] for lane in range(tc.threads)]
