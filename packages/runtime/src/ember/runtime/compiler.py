"""`Compiler`: source to a device binary, with an on-disk cache keyed by the source hash.

Cache entries live in `$EMBER_CACHE_DIR/compile/` (default `~/.cache/ember/compile/`), one file per key:
    b"EMBC" | sha256(payload) (32 bytes) | len(payload) (8 bytes, little endian) | payload
written to a temp file in the same folder, fsynced, then `os.replace`d into place, so a reader sees a whole entry
or none. An entry whose header does not match its payload (truncated, flipped bits) is deleted and rebuilt.
`CACHE=0` skips reading the cache (entries are still written).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import warnings
from pathlib import Path

_MAGIC = b"EMBC"
_HEADER = len(_MAGIC) + 32 + 8


class CompileError(RuntimeError):
    """The device compiler rejected a source; the message holds the compiler's output and the source."""


def cache_dir() -> Path:
    """The folder of compiled-program cache entries (`$EMBER_CACHE_DIR/compile`, default ~/.cache/ember/compile)."""
    return Path(os.environ.get("EMBER_CACHE_DIR") or Path.home() / ".cache" / "ember").expanduser() / "compile"


def _cache_reads_enabled() -> bool:
    return os.environ.get("CACHE", "1") != "0"


class Compiler:
    """Turns a program's source into the bytes the device's runtime loads.

    `cachekey` names the compiler and everything about it that changes its output (target, version); None turns the
    disk cache off (`compile_cached` is then `compile`). `flags` are the compiler's options, also part of the key.

        lib = Device["CPU"].compiler.compile_cached(src)"""

    flags: tuple[str, ...] = ()

    def __init__(self, cachekey: str | None = None):
        self.cachekey = cachekey

    def compile(self, src: str) -> bytes:
        """Compile `src` now, without the cache. A rejected source raises CompileError."""
        raise NotImplementedError(f"{type(self).__name__}: compile is not implemented")

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


def _read_entry(path: Path) -> bytes | None:
    """The payload of a cache entry, None if there is none; a corrupt entry is deleted (and None returned)."""
    try:
        data = path.read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as e:
        warnings.warn(f"compile cache: cannot read {path}: {e}", stacklevel=3)
        return None
    payload = data[_HEADER:]
    header_ok = len(data) >= _HEADER and data[:len(_MAGIC)] == _MAGIC and \
        int.from_bytes(data[_HEADER - 8:_HEADER], "little") == len(payload)
    if header_ok and hashlib.sha256(payload).digest() == data[len(_MAGIC):_HEADER - 8]:
        return payload
    warnings.warn(f"compile cache: {path} is corrupt ({len(data)} bytes); deleting it and compiling again",
                  stacklevel=3)
    path.unlink(missing_ok=True)
    return None


def _write_entry(path: Path, payload: bytes) -> None:
    """Write a cache entry atomically; a cache that cannot be written is a warning, not an error."""
    data = _MAGIC + hashlib.sha256(payload).digest() + len(payload).to_bytes(8, "little") + payload
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
