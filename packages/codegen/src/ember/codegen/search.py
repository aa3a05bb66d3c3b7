"""BEAM search: opt lists chosen by timing candidates on the device, the winner cached on disk.

`beam_search(ast, renderer, time_fn, width)` starts from no opts and the heuristic's choice; each round extends every
list in the beam by one opt (each UPCAST / UNROLL / PARTIAL amount that divides an axis, THREAD once; on GPUs each
LOCAL / GROUP / GROUPTOP amount that fits a workgroup), times the
new kernels with `time_fn` (seconds, inf for a kernel that fails), and keeps the `width` fastest. It stops when a
round finds nothing faster or the time budget is spent. The winner is written to `$EMBER_CACHE_DIR/beam/<key>`
(an `ember.uops.files` entry: JSON, verified against its key, see cache.py); a later search of the same kernel for the
same device key and width, in any process, reads it back without timing anything, so a cached run is deterministic.
A cached opt list that does not apply to its kernel (edited, or written for another) is a warning and searched again.

The device side stays outside codegen: the caller's `time_fn` compiles and launches a ProgramSpec (the tensor
engine does this on scratch buffers when `BEAM=n` is set).
"""

from __future__ import annotations

import json
import math
import time
import warnings
from collections.abc import Callable
from pathlib import Path

from ember.codegen.cache import kernel_key
from ember.codegen.gpudims import THREAD_KINDS, sequential
from ember.codegen.heuristic import hand_coded_opts
from ember.codegen.opt import KernelOptError, apply_opts, kernel_ranges, range_size
from ember.codegen.pipeline import to_program
from ember.codegen.program import Opt, OptOps, ProgramSpec
from ember.codegen.renderer import Renderer
from ember.uops import AxisType, Ops, UOp, files, settings

MAX_EXPANSION = 256  # most copies the UPCAST / UNROLL / PARTIAL axes of one kernel may expand into
timed = 0  # candidates timed in this process (a search answered by the cache times none)


def cache_path(ast: UOp, device_key: str, width: int) -> Path:
    """Where the BEAM winner of `ast` for `device_key` and `width` is cached."""
    return settings.cache_root() / "beam" / kernel_key(ast, device_key, width)


def _expansion(ast: UOp) -> int:
    n = 1
    for r in kernel_ranges(ast):
        if r.arg[1] in (AxisType.UPCAST, AxisType.UNROLL):
            n *= range_size(r) or 1
    return n


def actions(ast: UOp, renderer: Renderer) -> list[Opt]:
    """Every single opt that applies to the kernel and keeps its expansion within MAX_EXPANSION."""
    rngs = kernel_ranges(ast)
    threaded = any(r.arg[1] is AxisType.THREAD for r in rngs)
    packed = any(u.op is Ops.DEFINE_LOCAL for u in ast.toposort())
    grouped = any(r.arg[1] is AxisType.GROUP_REDUCE for r in rngs)
    room = MAX_EXPANSION // _expansion(ast)
    out: list[Opt] = []
    for i, r in enumerate(rngs):
        size, kind = range_size(r), r.arg[1]
        if size is None:
            continue
        if kind in (AxisType.GLOBAL, AxisType.REDUCE):  # a remainder padded away (a quarter wasted at most)
            out += [Opt(OptOps.PADTO, i, a) for a in (8, 32) if size % a and size >= 4 * a]
        if kind is AxisType.GLOBAL:
            out += [Opt(OptOps.UPCAST, i, a) for a in (2, 4, 8, 16, 32) if size % a == 0 and a <= room]
            if renderer.has_threads and renderer.max_threads > 1 and not threaded and size >= 2:
                out.append(Opt(OptOps.THREAD, i, renderer.max_threads))
            out += [Opt(OptOps.SWAP, i, j) for j in range(i + 1, len(rngs)) if rngs[j].arg[1] is AxisType.GLOBAL]
        elif kind is AxisType.REDUCE:
            out += [Opt(OptOps.UNROLL, i, a) for a in (2, 4, 8, 16) if size % a == 0 and a <= room]
            out += [Opt(OptOps.PARTIAL, i, a) for a in (8, 16, 32) if size % a == 0 and size > a and a <= room]
        if renderer.has_local and not sequential(rngs):  # workgroups: output axes on threads, a reduce across them
            threads = math.prod(range_size(x) or 1 for x in rngs if x.arg[1] in THREAD_KINDS)
            fits = [a for a in (2, 4, 8, 16, 32, 64, 128, 256) if size % a == 0 and
                    threads * a <= renderer.max_workgroup_threads]
            if kind is AxisType.GLOBAL:
                out += [Opt(OptOps.LOCAL, i, a) for a in fits]
            elif kind is AxisType.REDUCE and not grouped:
                out += [Opt(op, i, a) for op in (OptOps.GROUP, OptOps.GROUPTOP) for a in fits if a >= 8]
        if kind in (AxisType.GLOBAL, AxisType.THREAD) and not packed and renderer.has_threads:
            out.append(Opt(OptOps.PACK, i, 0))  # (a panel lives on the stack of a CPU thread)
    return out


def _read(path: Path, ast: UOp, renderer: Renderer) -> list[Opt] | None:
    if files.cache_folder("beam") is None:
        return None
    if (entry := files.read_entry(path, path.name)) is None:
        return None
    try:
        data = json.loads(entry.payload)
        opts = [Opt(OptOps[op], int(axis), int(amount)) for op, axis, amount in data["opts"]]
        to_program(ast, renderer, opts)  # the opts must fit this kernel and target
        return opts
    except (ValueError, KeyError, TypeError, KernelOptError) as e:
        warnings.warn(f"BEAM cache: {path} is unreadable or does not fit its kernel ({type(e).__name__}: {e}); "
                      "searching again", stacklevel=3)
        path.unlink(missing_ok=True)
        return None


def _write(path: Path, opts: list[Opt], seconds: float) -> None:
    if files.cache_folder("beam") is None:
        return
    payload = json.dumps({"opts": [[o.op.name, o.axis, o.amount] for o in opts], "seconds": seconds}).encode()
    files.write_entry(path, path.name, payload, {"kind": "beam"})


def beam_search(ast: UOp, renderer: Renderer, time_fn: Callable[[ProgramSpec], float], width: int,
                device_key: str = "", budget_s: float = 60.0) -> list[Opt]:
    """The fastest opt list found for `ast` (see the module doc). `device_key` names the device the times are for."""
    if width < 1:
        raise ValueError(f"beam_search: width must be >= 1, got {width}")
    path = cache_path(ast, device_key or renderer.device, width)
    if (cached := _read(path, ast, renderer)) is not None:
        return cached
    start = time.perf_counter()
    seen: dict[tuple[Opt, ...], float] = {}

    def measure(opts: list[Opt]) -> float:
        global timed
        key = tuple(opts)
        if key not in seen:
            try:
                spec = to_program(ast, renderer, list(opts))
            except KernelOptError:
                seen[key] = float("inf")
                return seen[key]
            timed += 1
            seen[key] = time_fn(spec)
        return seen[key]

    beam = sorted([[], hand_coded_opts(ast, renderer)], key=measure)[:width]
    best = min(beam, key=measure)
    while time.perf_counter() - start < budget_s:
        cands = []
        for opts in beam:
            cur = apply_opts(ast, opts)
            cands += [opts + [a] for a in actions(cur, renderer)]
        if not cands:
            break
        for c in cands:
            measure(c)
            if time.perf_counter() - start >= budget_s:
                break
        beam = sorted((c for c in cands if tuple(c) in seen), key=measure)[:width]
        if not beam or measure(beam[0]) >= measure(best):
            break
        best = beam[0]
    _write(path, best, measure(best))
    return best
