"""`Compiler`: source to a device binary, with an on-disk cache keyed by the source hash (or by a key naming it).

Cache entries live in `$EMBER_CACHE_DIR/compile/` (default `~/.cache/ember/compile/`), one file per key (the hash of
the compiler's cachekey, its flags and the source), each an `ember.uops.files` entry: data that cannot execute on
load, holding its key and its payload's sha256, written atomically but not fsynced (a write a crash tore fails
verification and is rebuilt), the folder bounded by `EMBER_CACHE_MAX_SIZE`.
The entry's meta says what the payload is: `{"kind": "library"}` the compiled bytes, `{"kind": "reference",
"library": <entry>}` a pointer to the entry holding the library (`lib-<sha256>`: the library a batch compiled the
source into). A caller that names its source by a `src_key` (codegen's `ProgramSpec.src_key`: one key, one source,
whatever process renders it) has the entry filed as `key-<hash of cachekey, flags, src_key>` instead, written once
this compiler compiled that source (or found its library by the source's hash), and read before the source is even
needed: a warm process finds its libraries without rendering one source. So a library is only ever compiled from a
source its caller gave, and one on disk is trusted as much by a key as by a source hash. An entry that fails
verification (another key, truncated, flipped bits), a library the compiler does not recognise as its own output
(`Compiler.check_binary`, e.g. not an ELF shared object for the CPU), or a reference whose library is gone is
deleted and rebuilt, with a warning. A cache folder another user could write is not used (see ember.uops.files).
`CACHE=0` skips reading the cache (entries are still written).
"""

from __future__ import annotations

import hashlib
import re
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

from ember.uops import files, settings

_LEGACY_MAGICS = (b"EMBC", b"EMBR")  # entries of the format before ember.uops.files: rebuilt
_ENTRY_NAME = re.compile(r"(lib-|key-)?[0-9a-f]{64}")  # what a reference may point at: an entry of this folder

Source = str | Callable[[], str]  # a source, or the function that renders it (called only when it is needed)


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

    def _digest(self, *parts: str) -> str:
        """The hash of the cachekey, the flags and `parts`."""
        h = hashlib.sha256()
        for part in (self.cachekey or "", *self.flags, *parts):
            h.update(part.encode())
            h.update(b"\0")
        return h.hexdigest()

    def cache_key(self, src: str) -> str:
        """The key of `src`'s cache entry: the hash of the cachekey, the flags and the source."""
        return self._digest(src)

    def cache_path(self, src: str) -> Path:
        """Where the cache entry of `src` lives."""
        return cache_dir() / self.cache_key(src)

    def src_key_entry(self, src_key: str) -> str:
        """The name of the cache entry filed under a caller's `src_key` (see the module doc)."""
        return f"key-{self._digest('src_key', src_key)}"

    def cached_library(self, src_key: str) -> bytes | None:
        """The library compiled (by this compiler's cachekey and flags) from the source `src_key` names, if the cache
        holds it; else None (also with the cache off or `CACHE=0`)."""
        if self.cachekey is None or not _cache_reads_enabled() or (folder := _usable_cache_dir()) is None:
            return None
        found = self._read(folder, self.src_key_entry(src_key))
        return None if found is None else found[0]

    def compile_cached(self, src: Source, src_key: str | None = None) -> bytes:
        """`compile(src)`, reusing the result of an earlier compile of the same source (in any process). With a
        `src_key` naming the source, the library is looked up by it first (`src`, a function that renders it, is then
        not called) and filed under it."""
        if self.cachekey is None or (folder := _usable_cache_dir()) is None:
            return self.compile(src if isinstance(src, str) else src())
        return self._compile_cached(folder, src, src_key)[0]

    def _compile_cached(self, folder: Path, src: Source, src_key: str | None) -> tuple[bytes, str]:
        """compile_cached's library, and the name of the entry that holds it."""
        reads = _cache_reads_enabled()
        keyed = None if src_key is None else self.src_key_entry(src_key)
        if reads and keyed is not None and (found := self._read(folder, keyed)) is not None:
            return found
        text = src if isinstance(src, str) else src()
        key = self.cache_key(text)
        if reads and (found := self._read(folder, key)) is not None:
            if keyed is not None:
                self._refer(folder, keyed, found[1])
            return found
        lib = self.compile(text)
        entry = key if keyed is None else keyed
        files.write_entry(folder / entry, entry, lib, {"kind": "library"}, durable=False)
        return lib, entry

    def _refer(self, folder: Path, name: str, target: str) -> None:
        """File the entry `name` as a reference to the library in the entry `target`."""
        if name != target:
            files.write_entry(folder / name, name, b"", {"kind": "reference", "library": target}, durable=False)

    def _read(self, folder: Path, key: str, follow: bool = True) -> tuple[bytes, str] | None:
        """The library of the entry `key` (through its reference) and the name of the entry that holds it; None if
        there is none or it is refused (deleted, with a warning, so that the caller's compile replaces it)."""
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
            return entry.payload, key
        target = entry.meta.get("library")
        if kind == "reference" and follow and isinstance(target, str) and _ENTRY_NAME.fullmatch(target) and \
                (found := self._read(folder, target, False)) is not None:
            return found
        if kind != "reference":
            warnings.warn(f"compile cache: {path} is corrupt (an entry of kind {kind!r}); deleting it and compiling "
                          "again", stacklevel=3)
        path.unlink(missing_ok=True)  # its library is gone: the source compiles again
        return None

    def compile_cached_many(self, programs: Sequence[tuple[str, str]],
                            src_keys: Sequence[str | None] | None = None) -> list[bytes]:
        """`compile_cached(src, src_key)` of each (function name, src) program, in order (`src_keys`: one per program,
        or None for all). When the compiler batches, the sources not in the cache are compiled together (in batches
        of distinct function names), each cache entry then referring to its batch's library; a batch the compiler
        rejects is compiled source by source, so the error names the source at fault."""
        keys = list(src_keys) if src_keys is not None else [None] * len(programs)
        if len(keys) != len(programs):
            raise ValueError(f"compile_cached_many: {len(keys)} src_keys for {len(programs)} programs")
        if not self.batches or self.cachekey is None or (folder := _usable_cache_dir()) is None:
            return [self.compile_cached(src, k) for (_, src), k in zip(programs, keys)]
        reads = _cache_reads_enabled()
        held: dict[str, tuple[bytes, str]] = {}  # src -> its library and the entry that holds it
        filed: set[str] = set()  # the src_keys whose entries are read or written
        todo: dict[str, str] = {}  # src -> name, the sources to compile (each once)
        for (name, src), k in zip(programs, keys):
            if k is not None and reads and (found := self._read(folder, self.src_key_entry(k))) is not None:
                held.setdefault(src, found)
                filed.add(k)
                todo.pop(src, None)
            elif src not in held and src not in todo:
                if reads and (found := self._read(folder, self.cache_key(src))) is not None:
                    held[src] = found
                else:
                    todo[src] = name
        first_key = {src: k for (_, src), k in reversed(list(zip(programs, keys))) if k is not None}
        for batch in _distinct_names(todo):
            if len(batch) == 1:
                held[batch[0]] = self._compile_cached(folder, batch[0], first_key.get(batch[0]))
                continue
            try:
                lib = self.compile_batch(batch)
            except CompileError:
                held.update((src, self._compile_cached(folder, src, first_key.get(src))) for src in batch)
                continue
            lib_name = f"lib-{hashlib.sha256(lib).hexdigest()}"
            files.write_entry(folder / lib_name, lib_name, lib, {"kind": "library"}, durable=False)
            for src in batch:
                held[src] = (lib, lib_name)
                if src not in first_key:  # (a keyed source's reference is filed under its key, below)
                    self._refer(folder, self.cache_key(src), lib_name)
        for (_, src), k in zip(programs, keys):  # each key not read above refers to its source's library (unless filed
            if k is not None and k not in filed:  # as that library's own entry)
                filed.add(k)
                self._refer(folder, self.src_key_entry(k), held[src][1])
        return [held[src][0] for _, src in programs]


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
