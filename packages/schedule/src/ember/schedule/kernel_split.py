"""Kernel split: a kernel body over BUFFERs becomes an `ExecItem`: its AST over numbered PARAMs, and the buffers."""

from __future__ import annotations

from dataclasses import dataclass

from ember.uops import Ops, UOp


@dataclass(frozen=True)
class ExecItem:
    """One step of a schedule: a kernel AST (a SINK over PARAMs, or a COPY) and the buffers its PARAMs stand for."""

    ast: UOp
    bufs: tuple[UOp, ...]


def split_kernel(ast: UOp) -> ExecItem:
    """Number the BUFFERs of a kernel body as PARAMs: the stored ones first, then the loaded ones in graph order.
    Equal kernels over different buffers give the same AST (hash-consing), so they compile once."""
    nodes = ast.toposort()
    stored = [u.src[0].src[0] for u in nodes if u.op is Ops.STORE]
    loaded = [u.src[0] for u in nodes if u.op is Ops.INDEX and u.src[0].op is Ops.BUFFER]
    bufs = tuple(dict.fromkeys(stored + loaded))
    params = {b: UOp(Ops.PARAM, b.dtype.ptr(b.arg), (), slot) for slot, b in enumerate(bufs)}
    return ExecItem(ast.substitute(params), bufs)


def copy_item(dst: UOp, src: UOp) -> ExecItem:
    """A device-to-device copy of a whole buffer: AST `COPY` with arg = bytes; bufs = (dst, src)."""
    return ExecItem(UOp(Ops.COPY, dst.dtype, (), dst.arg * dst.dtype.itemsize), (dst, src))
