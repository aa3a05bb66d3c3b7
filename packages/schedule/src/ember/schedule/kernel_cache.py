"""The kernels of templates on disk: a template's ExecItem (rangeify + kernel split) read back in a later process.

A template is a realized node's graph over numbered placeholder BUFFERs (`_kernel_item` in __init__.py); a model's
kernels are the same templates in every process, so the first step of a warm process reads them instead of running
rangeify again. Entries live under `$EMBER_CACHE_DIR/schedule/<key>`, each an `ember.uops.files` entry (verified
header, atomic write, LRU size bound) whose payload is JSON data: the item's AST and buffers as a UOp table
(`ember.uops.table`), never code. The key hashes the template's table, the module constants of the schedule that
steer its rules (a test that sets `attention.ONLINE_ONE_LOOP` makes other kernels) and the fingerprint of the
schedule's and uops' source files, so edited code never reads what older code wrote. `CACHE=0` skips reading
(entries are still written). An entry that does not decode to a kernel over the template's placeholders is a
warning and is rebuilt.
"""

from __future__ import annotations

import functools
import hashlib
import json
import sys
import warnings
from collections.abc import Callable, Collection
from pathlib import Path
from types import ModuleType
from typing import Any

import ember.uops
from ember.schedule.kernel_split import ExecItem
from ember.uops import Ops, UOp, files, settings
from ember.uops.table import from_table, to_table

ITEM_FORMAT = 1  # the layout of an entry's JSON; a change makes older entries miss (it is in the key)


@functools.cache
def fingerprint() -> str:
    """The hash of the schedule's and uops' source files (what a template's kernel is computed by)."""
    return files.source_fingerprint(f"schedule item format {ITEM_FORMAT}", Path(__file__).parent,
                                    Path(ember.uops.__file__).parent)


@functools.cache
def _constant_names() -> tuple[tuple[ModuleType, tuple[str, ...]], ...]:
    """The schedule modules' constants: upper-case names of plain values (bools, numbers, strings, tuples)."""
    mods = [m for name, m in sorted(sys.modules.items()) if name.startswith("ember.schedule.") and m is not None]
    return tuple((m, tuple(k for k, v in sorted(vars(m).items())
                           if k.lstrip("_").isupper() and type(v) in (bool, int, float, str, tuple))) for m in mods)


def _constants() -> str:
    """The values of the schedule's constants now: tests and users may set them, and the rules read them at each
    call (`attention.ONLINE_ONE_LOOP` makes other kernels)."""
    return repr([getattr(m, k, None) for m, names in _constant_names() for k in names])


@functools.lru_cache(maxsize=8)
def _folder(root: Path) -> Path | None:  # (checked once per cache root: a first step looks up ~70 templates)
    return files.cache_folder("schedule")


def _entry_path(rows: list[list[Any]]) -> tuple[Path, str] | None:
    if (folder := _folder(settings.cache_root())) is None:
        return None
    h = hashlib.sha256(fingerprint().encode() + b"\0" + _constants().encode() + b"\0")
    h.update(json.dumps(rows, separators=(",", ":")).encode())
    key = h.hexdigest()
    return folder / key, key


def _decode(payload: bytes, placeholders: Collection[UOp]) -> ExecItem:
    doc = json.loads(payload)
    if not isinstance(doc, dict) or doc.get("format") != ITEM_FORMAT:
        raise ValueError(f"format {doc.get('format') if isinstance(doc, dict) else None!r}, expected {ITEM_FORMAT}")
    nodes = from_table(doc["table"])
    ast, bufs = nodes[doc["ast"]], tuple(nodes[i] for i in doc["bufs"])
    if ast.op is not Ops.SINK or not all(b in placeholders for b in bufs):
        raise ValueError("not a kernel over the template's buffers")
    return ExecItem(ast, bufs)


def cached_item(template: UOp, placeholders: Collection[UOp], build: Callable[[], ExecItem]) -> ExecItem:
    """The ExecItem of `template` (its buffers among `placeholders`): read from the disk cache when a process built it
    before, else `build()` (then stored). A template whose args the table cannot hold is built and not stored."""
    try:
        rows, _ = to_table([template])
    except TypeError:
        return build()
    if (where := _entry_path(rows)) is None:
        return build()
    path, key = where
    if settings.CACHE.value and (entry := files.read_entry(path, key)) is not None:
        try:
            return _decode(entry.payload, placeholders)
        except (ValueError, KeyError, IndexError, TypeError) as e:
            warnings.warn(f"schedule cache: {path} is unreadable ({type(e).__name__}: {e}); building the kernel "
                          "again", stacklevel=2)
            path.unlink(missing_ok=True)
    item = build()
    try:
        table, (ast, *bufs) = to_table([item.ast, *item.bufs])
    except TypeError:
        return item
    doc = {"format": ITEM_FORMAT, "table": table, "ast": ast, "bufs": bufs}
    # (no fsync: ~5 ms each on a VM disk, 74 in a cold first step; a torn entry fails its checksum and is rebuilt)
    files.write_entry(path, key, json.dumps(doc, separators=(",", ":"), allow_nan=False).encode(), {"kind": "item"},
                      durable=False)
    return item


__all__ = ["cached_item", "fingerprint", "ITEM_FORMAT"]
