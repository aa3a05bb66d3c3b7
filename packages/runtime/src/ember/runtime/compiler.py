"""`Compiler`: source to a device binary, with an on-disk cache keyed by the source hash.

Cache entries live in `$EMBER_CACHE_DIR/compile/` (default `~/.cache/ember/compile/`), one file per key (the hash of
the compiler's cachekey, its flags and the source), each an `ember.uops.files` entry: data that cannot execute on
load, holding its key and its payload's sha256, written atomically, the folder bounded by `EMBER_CACHE_MAX_SIZE`.
The entry's meta says what the payload is: `{"kind": "library"}` the compiled bytes, `{"kind": "reference",
"library": "lib-<sha256>"}` a pointer to the library entry that a batch compiled this source into. An entry that
fails verification (another key, truncated, flipped bits), a library the compiler does not recognise as its own
output (`Compiler.check_binary`, e.g. not an ELF shared object for the CPU), or a reference whose library is gone is
deleted and rebuilt, with a warning. A cache folder another user could write is not used (see ember.uops.files).
`CACHE=0` skips reading the cache (entries are still written).
"""

from __future__ import annotations

import hashlib
import warnings
from collections.abc import Sequence
from pathlib import Path

from ember.uops import files, settings

_LEGACY_MAGICS = (b"EMBC", b"EMBR")  # entries of the format before ember.uops.files: rebuilt


class CompileError(RuntimeError):
    """The device compiler rejected a source; the message holds the compiler's output and the source."""


def cache_dir() -> Path:
    """The folder of compiled-program cache entries (`$EMBER_CACHE_DIR/compile`, default ~/.cache/ember/compile)."""
    return settings.cache_root() / "compile"


def _usable_cache_dir() -> Path | None:
    """cache_dir(), made private if missing; None (a warning) when it is refused or cannot be made."""
    return files.cache_folder("compile")


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

    def check_binary(self, lib: bytes) -> None:
        """Raise ValueError when `lib` cannot be this compiler's output (a cached library is checked before use);
        the base class accepts anything."""

    def cache_key(self, src: str) -> str:
        """The key of `src`'s cache entry: the hash of the cachekey, the flags and the source."""
        h = hashlib.sha256()
        for part in (self.cachekey or "", *self.flags, src):
            h.update(part.encode())
            h.update(b"\0")
        return h.hexdigest()

    def cache_path(self, src: str) -> Path:
        """Where the cache entry of `src` lives."""
        return cache_dir() / self.cache_key(src)

    def compile_cached(self, src: str) -> bytes:
        """`compile(src)`, reusing the result of an earlier compile of the same source (in any process)."""
        if self.cachekey is None or (folder := _usable_cache_dir()) is None:
            return self.compile(src)
        key = self.cache_key(src)
        if _cache_reads_enabled() and (lib := self._read(folder, key)) is not None:
            return lib
        lib = self.compile(src)
        files.write_entry(folder / key, key, lib, {"kind": "library"})
        return lib

    def _read(self, folder: Path, key: str, follow: bool = True) -> bytes | None:
        """The library of the entry `key` (through its reference), None if there is none or it is refused (deleted,
        with a warning, so that the caller's compile replaces it)."""
        path = folder / key
        if (entry := files.read_entry(path, key, legacy=_LEGACY_MAGICS)) is None:
            return None
        kind = entry.meta.get("kind")
        if kind == "library":
            try:
                self.check_binary(entry.payload)
            except ValueError as e:
                warnings.warn(f"compile cache: {path} is corrupt ({e}); deleting it and compiling again",
                              stacklevel=3)
                path.unlink(missing_ok=True)
                return None
            return entry.payload
        target = entry.meta.get("library")
        if kind == "reference" and follow and isinstance(target, str) and target.startswith("lib-") and \
                "/" not in target and (lib := self._read(folder, target, False)) is not None:
            return lib
        if kind != "reference":
            warnings.warn(f"compile cache: {path} is corrupt (an entry of kind {kind!r}); deleting it and compiling "
                          "again", stacklevel=3)
        path.unlink(missing_ok=True)  # its library is gone: the source compiles again
        return None

    def compile_cached_many(self, programs: Sequence[tuple[str, str]]) -> list[bytes]:
        """`compile_cached(src)` of each (function name, src) program, in order. When the compiler batches, the
        sources not in the cache are compiled together (in batches of distinct function names), each cache entry
        then referring to its batch's library; a batch the compiler rejects is compiled source by source, so the
        error names the source at fault."""
        if not self.batches or self.cachekey is None or (folder := _usable_cache_dir()) is None:
            return [self.compile_cached(src) for _, src in programs]
        libs: dict[str, bytes] = {}
        todo: dict[str, str] = {}  # src -> name, the sources to compile (each once)
        for name, src in programs:
            if src in libs or src in todo:
                continue
            if _cache_reads_enabled() and (lib := self._read(folder, self.cache_key(src))) is not None:
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
            files.write_entry(folder / lib_name, lib_name, lib, {"kind": "library"})
            for src in batch:
                key = self.cache_key(src)
                files.write_entry(folder / key, key, b"", {"kind": "reference", "library": lib_name})
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
