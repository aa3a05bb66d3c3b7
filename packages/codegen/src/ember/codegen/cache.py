"""Codegen's disk caches: programs (`cached_program`) and BEAM winners (search.py), keyed by the kernel's text.

Entries live under `$EMBER_CACHE_DIR` (default ~/.cache/ember): `program/<key>.pkl`, `beam/<key>.json`. A key hashes
the kernel AST's full text, the renderer, the opts asked for, and the fingerprint of codegen itself (the hash of its
source files), so an edited codegen never reads programs an older one wrote. Entries are written to a temp file and
renamed into place (a reader sees a whole entry or none); an unreadable entry is a warning and is rebuilt.
"""

from __future__ import annotations

import functools
import hashlib
import os
import pickle
import tempfile
import warnings
from pathlib import Path

from ember.codegen.pipeline import to_program
from ember.codegen.program import Opt, ProgramSpec
from ember.codegen.renderer import Renderer
from ember.uops import UOp, render, settings


@functools.cache
def fingerprint() -> str:
    """The hash of codegen's own source files."""
    h = hashlib.sha256()
    for f in sorted(Path(__file__).parent.glob("*.py")):
        h.update(f.name.encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


def kernel_key(ast: UOp, *parts: object) -> str:
    """A stable hash of a kernel (its whole graph as text) and `parts` (renderer, device, opts ...)."""
    h = hashlib.sha256(fingerprint().encode())
    for p in (*parts, render(ast, max_nodes=1 << 62)):
        h.update(b"\0" + str(p).encode())
    return h.hexdigest()


def write_atomic(path: Path, data: bytes) -> None:
    """Write a cache entry whole or not at all; a cache that cannot be written is a warning."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError as e:
        warnings.warn(f"codegen cache: cannot write {path}: {e}", stacklevel=3)


def _renderer_id(renderer: Renderer) -> str:
    # every capability the lowering reads: two renderers of one class that differ in one make other programs
    alu = sorted((op.name, tuple(map(repr, dts))) for op, dts in renderer.vector_alu.items())
    vectors = list(map(repr, renderer.vector_dtypes))
    return f"{type(renderer).__module__}.{type(renderer).__qualname__} {renderer.device} {renderer.max_threads} " \
           f"{renderer.max_vector} {renderer.has_local} {renderer.has_threads} {vectors} {alu} " \
           f"{renderer.mask_itemsize} {sorted(op.name for op in renderer.mask_alu)}"


def _program_path(ast: UOp, renderer: Renderer, opts: list[Opt] | None) -> Path | None:
    """Where the program of this kernel is cached; None under NOOPT (what `opts=None` means then depends on the
    environment: not cached)."""
    if settings.NOOPT.value:
        return None
    return settings.cache_root() / "program" / f"{kernel_key(ast, _renderer_id(renderer), opts)}.pkl"


def _read_program(path: Path | None) -> ProgramSpec | None:
    if path is None or not settings.CACHE.value:
        return None
    try:
        spec = pickle.loads(path.read_bytes())
        if isinstance(spec, ProgramSpec):
            return spec
        raise TypeError(f"not a ProgramSpec: {type(spec).__name__}")
    except FileNotFoundError:
        return None
    except Exception as e:  # noqa: BLE001 - any unreadable entry is rebuilt
        warnings.warn(f"codegen cache: {path} is unreadable ({e}); building the program again", stacklevel=3)
        return None


def load_program(ast: UOp, renderer: Renderer, opts: list[Opt] | None = None) -> ProgramSpec | None:
    """The program `cached_program` would return, if an identical kernel was built before (in any process); else
    None (also with `CACHE=0` or NOOPT). Cheap: callers use it to find the kernels that need a codegen."""
    return _read_program(_program_path(ast, renderer, opts))


def cached_program(ast: UOp, renderer: Renderer, opts: list[Opt] | None = None) -> ProgramSpec:
    """`to_program(ast, renderer, opts)`, read from the disk cache when an identical kernel was built before (in any
    process). `CACHE=0` skips reading (entries are still written), like the compile cache."""
    path = _program_path(ast, renderer, opts)
    if (spec := _read_program(path)) is not None:
        return spec
    spec = to_program(ast, renderer, opts)
    if path is None:
        return spec
    try:
        data = pickle.dumps(spec, protocol=pickle.HIGHEST_PROTOCOL)
    except RecursionError:  # a program too deep to pickle is rebuilt each time
        return spec
    write_atomic(path, data)
    return spec
