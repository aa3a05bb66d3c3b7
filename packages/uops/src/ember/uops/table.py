"""UOp graphs as plain data: a flat table (one row per node, sources before users) that JSON can hold, and back.

A row is `[op name, dtype, [source rows], arg, tag]`; dtypes, enums and floats are spelled by name (floats as hex, so
every bit and the sign of zero survive). Only whitelisted types are ever built on load: a table is data that cannot
execute, whatever file it came from. What cannot be stored (a UOp or a set in an arg) raises TypeError on encode;
a malformed table raises ValueError on decode.

    rows, roots = to_table([ast])            # rows: JSON-ready lists; roots: the row of each given UOp
    ast, = (from_table(rows)[i] for i in roots)

Several tables (or a caller's own records) can share one list of dtypes: `to_table(..., dtype_index=d)` stores each
dtype as its index in `d`, `from_table(..., dtypes=...)` reads them back (codegen's program cache: a program's
variables and its linear program are two tables, decoded at different times, over the dtypes of its buffers too).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import Enum
from typing import Any

from ember.uops.dtype import AddrSpace, DType, PtrDType, dtypes
from ember.uops.opcodes import Ops
from ember.uops.ops import AxisType, UOp

# the enums an arg may hold (a caller that stores its own, as codegen's OptOps, passes them in `enums`)
ENUMS: dict[str, type[Enum]] = {"Ops": Ops, "AxisType": AxisType, "AddrSpace": AddrSpace}


def encode_dtype(dt: DType) -> Any:
    if isinstance(dt, PtrDType):
        return {"ptr": encode_dtype(dt.base), "size": dt.size, "space": dt.addrspace.name}
    return [dt.name, dt.count]


def decode_dtype(x: Any) -> DType:
    if isinstance(x, dict):
        return decode_dtype(x["ptr"]).ptr(int(x["size"]), AddrSpace[x["space"]])
    name, count = x
    if not isinstance(name, str) or type(count) is not int:
        raise ValueError(f"not a dtype: {x!r}")
    return dtypes.from_name(name).vec(count)


def encode_value(v: Any, enums: Mapping[str, type[Enum]] = ENUMS) -> Any:
    """`v` as JSON data; TypeError for a type the format cannot hold. (Exact types: an IntEnum is not stored as its
    int, which would read back as a plain int.)"""
    if v is None or type(v) in (bool, int, str):
        return v
    if type(v) is float:
        return {"f": v.hex()}
    if type(v) in (tuple, list):
        return {"t" if type(v) is tuple else "l": [encode_value(x, enums) for x in v]}
    if isinstance(v, Enum) and enums.get(type(v).__name__) is type(v):
        return {"e": type(v).__name__, "n": v.name}
    if isinstance(v, DType):
        return {"d": encode_dtype(v)}
    raise TypeError(f"UOp table: cannot store a {type(v).__name__} arg")


def decode_value(x: Any, enums: Mapping[str, type[Enum]] = ENUMS) -> Any:
    if x is None or type(x) in (bool, int, str):
        return x
    if isinstance(x, dict) and len(x) == 1:
        (kind, v), = x.items()
        if kind == "f" and isinstance(v, str):
            return float.fromhex(v)
        if kind in ("t", "l") and isinstance(v, list):
            items = [decode_value(i, enums) for i in v]
            return tuple(items) if kind == "t" else items
        if kind == "d":
            return decode_dtype(v)
    if isinstance(x, dict) and set(x) == {"e", "n"} and x["e"] in enums:
        return enums[x["e"]][x["n"]]
    raise ValueError(f"not a stored value: {str(x)[:80]}")


_PLAIN = (type(None), bool, int, str)  # (stored as they are)
_OP_NAMES: Mapping[Ops, str] = {op: op.name for op in Ops}  # (`op.name` is a Python-level property: a call per row)


def to_table(roots: Sequence[UOp], enums: Mapping[str, type[Enum]] = ENUMS,
             dtype_index: dict[DType, int] | None = None) -> tuple[list[list[Any]], list[int]]:
    """The graphs under `roots` as one table (shared nodes once, in toposort order, so equal graphs give equal
    tables), and the row of each root. TypeError when an arg or tag cannot be stored.

    With `dtype_index`, a row holds its dtype as an index into that dict (a dtype not in it yet is added with the
    next index): a caller with several tables, or dtypes of its own, stores `[encode_dtype(d) for d in dtype_index]`
    once and decodes with `from_table(rows, dtypes=...)`."""
    index: dict[UOp, int] = {}
    rows: list[list[Any]] = []
    dts: dict[DType, Any] = {}  # (dtypes are interned: each spelled once)
    for root in roots:
        for u in root.toposort(gate=lambda x: x not in index) if index else root.toposort():
            index[u] = len(rows)
            if (dt := dts.get(u.dtype)) is None:
                dt = dts[u.dtype] = encode_dtype(u.dtype) if dtype_index is None else \
                    dtype_index.setdefault(u.dtype, len(dtype_index))
            arg, tag = u.arg, u.tag
            rows.append([_OP_NAMES[u.op], dt, [index[s] for s in u.src],
                         arg if type(arg) in _PLAIN else encode_value(arg, enums),
                         tag if type(tag) in _PLAIN else encode_value(tag, enums)])
    return rows, [index[r] for r in roots]


_OPS: Mapping[str, Ops] = dict(Ops.__members__)  # (a dict lookup; `Ops[name]` is a Python call per row)


def from_table(rows: Any, enums: Mapping[str, type[Enum]] = ENUMS,
               dtypes: Sequence[DType] | None = None) -> list[UOp]:
    """The UOps of a `to_table` table, one per row (hash-consed: a node that exists already is that node);
    ValueError when `rows` is not such a table. `dtypes`: the dtypes a table made with `dtype_index` refers to."""
    try:
        nodes: list[UOp] = []
        if dtypes is not None:  # (30,000 rows in the programs of the tiny Llama's step: this loop is kept lean)
            for op, dt, src, arg, tag in rows:
                if (src and min(src) < 0) or dt < 0:  # (one past the rows built so far: an IndexError below)
                    raise ValueError("a source or dtype index out of order")
                nodes.append(UOp(_OPS[op], dtypes[dt], tuple([nodes[i] for i in src]),
                                 arg if type(arg) in _PLAIN else decode_value(arg, enums),
                                 tag if type(tag) in _PLAIN else decode_value(tag, enums)))
            return nodes
        dts: dict[Any, DType] = {}  # (a table repeats a few dtypes many times)
        for op, dt, src, arg, tag in rows:
            if src and (min(src) < 0 or max(src) >= len(nodes)):  # (a non-int index fails the lookup below)
                raise ValueError("a source index out of order")
            if (dtype := dts.get(key := (dt[0], dt[1]) if type(dt) is list and len(dt) == 2 else repr(dt))) is None:
                dtype = dts[key] = decode_dtype(dt)
            nodes.append(UOp(_OPS[op], dtype, tuple([nodes[i] for i in src]),
                             arg if type(arg) in _PLAIN else decode_value(arg, enums),
                             tag if type(tag) in _PLAIN else decode_value(tag, enums)))
        return nodes
    except Exception as e:  # noqa: BLE001 - whatever malformed data makes our constructors raise: not a table
        raise ValueError(f"not a UOp table ({type(e).__name__}: {e})") from None


__all__ = ["ENUMS", "encode_dtype", "decode_dtype", "encode_value", "decode_value", "to_table", "from_table"]
