"""Codegen's disk caches: programs (`cached_program`) and BEAM winners (search.py), keyed by the kernel's text.

Entries live under `$EMBER_CACHE_DIR` (default ~/.cache/ember): `program/<key>`, `beam/<key>`, each an
`ember.uops.files` entry (a JSON header holding the key and the payload's sha256, then the payload; written
atomically; the folder bounded by `EMBER_CACHE_MAX_SIZE`; a folder another user could write is not used). A key
hashes the kernel AST's full text, the renderer, the opts asked for, and the fingerprint of codegen itself (the hash
of its source files), so an edited codegen never reads programs an older one wrote.

A program entry is data, never code: its payload is two lines of JSON (`program_to_json`): the launch facts (with the
variables as an `ember.uops.table` table), then the linear UOp program as such a table (ops, dtypes, enums and args by
name, floats as hex; the dtypes of both tables and of the buffers listed once in the first line). The source is not
stored. A program read back decodes its table and renders its source again only on first use of its `uops` or `src`,
so whatever is on disk, only source that Ember's renderer wrote is ever compiled; its `src_key` (the hash of the
entry's key and payload) names that source: the device's compile cache files the library it compiled from the source
under the key (ember.runtime.compiler), so a warm process finds each library with neither. An entry whose header
fails verification or decoding is a warning and is rebuilt; a table that does not decode (which a write, checked by
reading it back, never stores) is a ValueError on first use.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import warnings
from collections.abc import Callable, Mapping
from enum import Enum
from pathlib import Path
from typing import Any

from ember.codegen.pipeline import to_program
from ember.codegen.program import BufferArg, Estimates, Opt, OptOps, ProgramSpec
from ember.codegen.renderer import Renderer
from ember.uops import DType, UOp, files, render, settings
from ember.uops.table import ENUMS, decode_dtype, encode_dtype, from_table, to_table

# the layout of a program entry's JSON; a change makes older entries miss (it is in the key). 3: ember.uops.table's
# rows (an IntEnum arg, as an Ops, stored by name: format 2 stored its number, which read back as a plain int); 4: the
# program's function name beside its display name
PROGRAM_FORMAT = 4
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # a name and a function are identifiers (rendered into source)


@functools.cache
def fingerprint() -> str:
    """The hash of codegen's own source files."""
    return files.source_fingerprint(f"program format {PROGRAM_FORMAT}", Path(__file__).parent)


def kernel_key(ast: UOp, *parts: object) -> str:
    """A stable hash of a kernel (its whole graph as text) and `parts` (renderer, device, opts ...)."""
    h = hashlib.sha256(fingerprint().encode())
    for p in (*parts, render(ast, max_nodes=1 << 62)):
        h.update(b"\0" + str(p).encode())
    return h.hexdigest()


# *** programs as JSON: the UOps as ember.uops.table tables (only whitelisted types are ever built on load) ***
_ENUMS: Mapping[str, type[Enum]] = {**ENUMS, "OptOps": OptOps}


def program_to_json(spec: ProgramSpec) -> bytes:
    """The program as JSON data (everything but the source, which the renderer rebuilds); TypeError for an arg the
    format cannot hold. Two lines: the launch facts (with the variables' own rows), then the linear program's rows,
    which a reader decodes only when the program is read (`ProgramSpec.uops`, or its source rendered)."""
    dts: dict[DType, int] = {}  # each dtype's index in the list of dtypes
    table, program = to_table(spec.uops, _ENUMS, dts)
    var_rows, variables = to_table(spec.vars, _ENUMS, dts)
    e = spec.estimates
    head = {"format": PROGRAM_FORMAT, "name": spec.name, "function": spec.function, "var_rows": var_rows,
            "vars": variables,
            "bufs": [[b.slot, dts.setdefault(b.dtype, len(dts)), b.size, b.written] for b in spec.bufs],
            "global_size": list(spec.global_size),
            "local_size": None if spec.local_size is None else list(spec.local_size),
            "estimates": [e.flops, e.bytes_read, e.bytes_written],
            "opts": [[o.op.name, o.axis, o.amount] for o in spec.applied_opts],
            "dtypes": [encode_dtype(dt) for dt in dts]}
    body = {"table": table, "program": program}
    return b"\n".join(json.dumps(x, separators=(",", ":"), allow_nan=False).encode() for x in (head, body))


def program_from_json(data: bytes, renderer: Renderer, src_key: str | None = None) -> ProgramSpec:
    """The ProgramSpec a `program_to_json` payload describes, named by `src_key`, its linear program decoded and its
    source rendered by `renderer` on first use; ValueError when the payload is not such a program (from the first use,
    for a malformed linear program)."""
    return _decode_program(data, renderer.render, src_key)


def _decode_program(data: bytes, render: Callable[[str, tuple[UOp, ...]], str],
                    src_key: str | None = None) -> ProgramSpec:
    try:
        head_text, newline, body = data.partition(b"\n")
        if not newline:
            raise ValueError("no second line (the linear program)")
        head = json.loads(head_text)
        if head["format"] != PROGRAM_FORMAT:
            raise ValueError(f"format {head['format']!r}, expected {PROGRAM_FORMAT}")
        dts = [decode_dtype(x) for x in head["dtypes"]]
        var_nodes = from_table(head["var_rows"], _ENUMS, dts)
        name, function = head["name"], head["function"]
        if not all(isinstance(x, str) and _IDENTIFIER.fullmatch(x) for x in (name, function)):
            raise ValueError(f"the name {name!r} or the function {function!r} is not an identifier")
        bufs = tuple(BufferArg(int(slot), dts[_index(dt)], int(size), bool(written))
                     for slot, dt, size, written in head["bufs"])
        local = head["local_size"]
        return ProgramSpec.read_later(
            functools.partial(_decode_linear, body, dts), render, src_key, name, bufs,
            vars=tuple(var_nodes[i] for i in head["vars"]), global_size=tuple(int(x) for x in head["global_size"]),
            local_size=None if local is None else tuple(int(x) for x in local),
            estimates=Estimates(*(int(x) for x in head["estimates"])),
            applied_opts=tuple(Opt(OptOps[op], int(axis), int(amount)) for op, axis, amount in head["opts"]),
            function=function)
    except Exception as e:  # noqa: BLE001 - whatever the data makes our constructors raise: not a program
        raise ValueError(f"not a program ({type(e).__name__}: {e})") from None


def _index(i: Any) -> int:
    if type(i) is not int or i < 0:
        raise ValueError(f"not an index: {i!r}")
    return i


def _decode_linear(body: bytes, dts: list[DType]) -> tuple[UOp, ...]:
    """The linear program of a program entry's second line."""
    try:
        doc = json.loads(body)
        nodes = from_table(doc["table"], _ENUMS, dts)
        return tuple(nodes[i] for i in doc["program"])
    except Exception as e:  # noqa: BLE001 - as _decode_program
        raise ValueError(f"not a program ({type(e).__name__}: {e})") from None


def _renderer_id(renderer: Renderer) -> str:
    # every capability the lowering reads: two renderers of one class that differ in one make other programs
    alu = sorted((op.name, tuple(map(repr, dts))) for op, dts in renderer.vector_alu.items())
    vectors = list(map(repr, renderer.vector_dtypes))
    # and the instance's settings (a GPU's arch), which its rendering reads too
    instance = sorted((k, repr(v)) for k, v in vars(renderer).items())
    return f"{type(renderer).__module__}.{type(renderer).__qualname__} {renderer.device} {renderer.max_threads} " \
           f"{renderer.max_vector} {renderer.has_local} {renderer.has_threads} {vectors} {alu} " \
           f"{renderer.mask_itemsize} {sorted(op.name for op in renderer.mask_alu)} {instance}"


def _src_key(key: str, payload: bytes) -> str:
    """The name of the source of the program stored under `key` as `payload`: the key covers the kernel, the renderer
    and codegen's own code, the payload the program itself (an entry rebuilt with other contents names another)."""
    return hashlib.sha256(key.encode() + b"\0" + payload).hexdigest()


def _program_path(ast: UOp, renderer: Renderer, opts: list[Opt] | None) -> tuple[Path, str] | None:
    """Where the program of this kernel is cached, and its key; None under NOOPT (what `opts=None` means then
    depends on the environment: not cached) or when the cache folder is refused."""
    if settings.NOOPT.value or (folder := files.cache_folder("program")) is None:
        return None
    key = kernel_key(ast, _renderer_id(renderer), opts)
    return folder / key, key


def _read_program(where: tuple[Path, str] | None, renderer: Renderer) -> ProgramSpec | None:
    if where is None or not settings.CACHE.value:
        return None
    path, key = where
    if (entry := files.read_entry(path, key)) is None:
        return None
    try:
        return program_from_json(entry.payload, renderer, _src_key(key, entry.payload))
    except ValueError as e:
        warnings.warn(f"codegen cache: {path} is unreadable ({e}); building the program again", stacklevel=3)
        path.unlink(missing_ok=True)
        return None


def load_program(ast: UOp, renderer: Renderer, opts: list[Opt] | None = None) -> ProgramSpec | None:
    """The program `cached_program` would return, if an identical kernel was built before (in any process); else
    None (also with `CACHE=0` or NOOPT). Cheap (its source is rendered on first use, and it has a `src_key`):
    callers use it to find the kernels that need a codegen."""
    return _read_program(_program_path(ast, renderer, opts), renderer)


def cached_program(ast: UOp, renderer: Renderer, opts: list[Opt] | None = None) -> ProgramSpec:
    """`to_program(ast, renderer, opts)`, read from the disk cache when an identical kernel was built before (in any
    process). `CACHE=0` skips reading (entries are still written), like the compile cache. A program the cache
    holds (read or written) has a `src_key`."""
    where = _program_path(ast, renderer, opts)
    if (spec := _read_program(where, renderer)) is not None:
        return spec
    spec = to_program(ast, renderer, opts)
    if where is None:
        return spec
    try:
        data = program_to_json(spec)
        # what is stored must read back as this very program (UOps are hash-consed: equal means the same nodes); its
        # source then renders again as this one (a renderer's output is its program's alone), not rendered here
        if _decode_program(data, lambda name, uops: spec.src) != spec:
            return spec
    except (TypeError, ValueError, RecursionError):  # an arg the format cannot hold: built again each time
        return spec
    files.write_entry(where[0], where[1], data, {"kind": "program"}, durable=False)  # (verified when read)
    return spec.with_src_key(_src_key(where[1], data))
