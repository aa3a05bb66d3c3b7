"""`Compiler`: source to a device binary, with an on-disk cache keyed by the source hash.

Cache entries live in `$EMBER_CACHE_DIR/compile/` (default `~/.cache/ember/compile/`), one file per key:
    magic (4 bytes) | sha256(payload) (32 bytes) | len(payload) (8 bytes, little endian) | payload
written to a temp file in the same folder, fsynced, then `os.replace`d into place, so a reader sees a whole entry
or none. The magic `EMBC` marks a library; `EMBR` a reference, whose payload is the file name of the library entry
(`lib-<sha256>`) that a batch compiled this source into. An entry whose header does not match its payload
(truncated, flipped bits) is deleted and rebuilt, and so is a reference whose library is gone.
`CACHE=0` skips reading the cache (entries are still written).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path

from ember.uops import settings

_MAGIC, _REF_MAGIC = b"EMBC", b"EMBR"
_HEADER = len(_MAGIC) + 32 + 8


class CompileError(RuntimeError):
    """The device compiler rejected a source; the message holds the compiler's output and the source."""


def cache_dir() -> Path:
    """The folder of compiled-program cache entries (`$EMBER_CACHE_DIR/compile`, default ~/.cache/ember/compile)."""
    return settings.cache_root() / "compile"


def _cache_reads_enabled() -> bool:
    return settings.CACHE.value


class Compiler:
    """Turns a program's source into the bytes the device's runtime loads.

    `cachekey` names the compiler and everything about it that changes its output (target, version); None turns the
    disk cache off (`compile_cached` is then `compile`). `flags` are the compiler's options, also part of the key.
    A compiler whose `batches` is True also implements `compile_batch`: several programs in one run of the tool,
    which then pays its start-up (and link) once; `compile_cached_many` uses it.

        lib = Device["CPU"].compiler.compile_cached(src)"""

    flags: tuple[str, ...] = ()
    batches: bool = False

    def __init__(self, cachekey: str | None = None):
        self.cachekey = cachekey

    def compile(self, src: str) -> bytes:
        """Compile `src` now, without the cache. A rejected source raises CompileError."""
        raise NotImplementedError(f"{type(self).__name__}: compile is not implemented")

    def compile_batch(self, srcs: Sequence[str]) -> bytes:
        """One library holding the functions of all `srcs` (their function names distinct), compiled in one run.
        A rejected batch raises CompileError."""
        raise NotImplementedError(f"{type(self).__name__}: compile_batch is not implemented (batches is False)")

    def cache_path(self, src: str) -> Path:
        """Where the cache entry of `src` lives."""
        h = hashlib.sha256()
        for part in (self.cachekey or "", *self.flags, src):
            h.update(part.encode())
            h.update(b"\0")
        return cache_dir() / h.hexdigest()

    def compile_cached(self, src: str) -> bytes:
        """`compile(src)`, reusing the result of an earlier compile of the same source (in any process)."""
        if self.cachekey is None:
            return self.compile(src)
        path = self.cache_path(src)
        if _cache_reads_enabled() and (lib := _read_entry(path)) is not None:
            return lib
        lib = self.compile(src)
        _write_entry(path, lib)
        return lib

    def compile_cached_many(self, programs: Sequence[tuple[str, str]]) -> list[bytes]:
        """`compile_cached(src)` of each (function name, src) program, in order. When the compiler batches, the
        sources not in the cache are compiled together (in batches of distinct function names), each cache entry
        then referring to its batch's library; a batch the compiler rejects is compiled source by source, so the
        error names the source at fault."""
        if not self.batches or self.cachekey is None:
            return [self.compile_cached(src) for _, src in programs]
        libs: dict[str, bytes] = {}
        todo: dict[str, str] = {}  # src -> name, the sources to compile (each once)
        for name, src in programs:
            if src in libs or src in todo:
                continue
            if _cache_reads_enabled() and (lib := _read_entry(self.cache_path(src))) is not None:
                libs[src] = lib
            else:
                todo[src] = name
        for batch in _distinct_names(todo):
            if len(batch) == 1:
                libs[batch[0]] = self.compile_cached(batch[0])
                continue
            try:
                lib = self.compile_batch(batch)
            except CompileError:
                libs.update((src, self.compile_cached(src)) for src in batch)
                continue
            lib_name = f"lib-{hashlib.sha256(lib).hexdigest()}"
            _write_entry(cache_dir() / lib_name, lib)
            for src in batch:
                _write_entry(self.cache_path(src), lib_name.encode(), magic=_REF_MAGIC)
                libs[src] = lib
        return [libs[src] for _, src in programs]


def _distinct_names(todo: dict[str, str]) -> list[list[str]]:
    """The sources split into batches in which no function name repeats (kernels of one shape share a name)."""
    batches: list[tuple[set[str], list[str]]] = []
    for src, name in todo.items():
        batch = next((b for b in batches if name not in b[0]), None)
        if batch is None:
            batches.append(batch := (set(), []))
        batch[0].add(name)
        batch[1].append(src)
    return [srcs for _, srcs in batches]


def _read_entry(path: Path, follow: bool = True) -> bytes | None:
    """The library of a cache entry (through its reference), None if there is none; a corrupt entry, or a
    reference to a missing library, is deleted (and None returned)."""
    try:
        data = path.read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as e:
        warnings.warn(f"compile cache: cannot read {path}: {e}", stacklevel=3)
        return None
    payload, magic = data[_HEADER:], data[:len(_MAGIC)]
    header_ok = len(data) >= _HEADER and magic in (_MAGIC, _REF_MAGIC) and \
        int.from_bytes(data[_HEADER - 8:_HEADER], "little") == len(payload)
    if header_ok and hashlib.sha256(payload).digest() == data[len(_MAGIC):_HEADER - 8]:
        if magic == _MAGIC:
            return payload
        target = payload.decode(errors="replace")
        if follow and target.startswith("lib-") and (lib := _read_entry(path.parent / target, False)) is not None:
            return lib
        path.unlink(missing_ok=True)  # its library is gone: the source compiles again
        return None
    warnings.warn(f"compile cache: {path} is corrupt ({len(data)} bytes); deleting it and compiling again",
                  stacklevel=3)
    path.unlink(missing_ok=True)
    return None


def _write_entry(path: Path, payload: bytes, magic: bytes = _MAGIC) -> None:
    """Write a cache entry atomically; a cache that cannot be written is a warning, not an error."""
    data = magic + hashlib.sha256(payload).digest() + len(payload).to_bytes(8, "little") + payload
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        warnings.warn(f"compile cache: cannot write {path}: {e}", stacklevel=3)
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
