"""Files: where every cache lives, how every cache entry and checkpoint file is written, and when an entry is trusted.

- `cache_folder(name)`: `cache_root()/name`, each folder created 0700 whatever the umask; None (no cache, with one
  warning) when the root or the folder is not a folder owned by this user, or is writable by group or others.
- `atomic_write(path, data)`, `atomic_open(path)`, `atomic_folder(path)`: the data goes to a temp beside the target
  (`.<name>.<pid>.ember-tmp-*`), is fsynced and renamed into place, so a reader or a crash sees the old or the new
  whole (`durable=False`: no fsync, for cache entries a read verifies); the temp is removed on any error.
  `remove_stale_temps(folder)` removes the temps of dead processes (a write killed half way).
- `write_entry(path, key, payload, meta)` / `read_entry(path, key)`: a cache entry is data that cannot execute on
  load: a magic line, one JSON header line (the entry's key, the payload's size and sha256, `meta`) and the raw
  payload. A read checks all of it; an entry that fails (another key, an edited or truncated payload, no header) is
  a warning, is deleted, and reads as None (the caller rebuilds it).
- `source_fingerprint(label, *folders)`: the hash of a label and the Python sources of folders, a part of a cache's
  keys so that edited code never reads what older code wrote.
- Bounded: a cache folder larger than `EMBER_CACHE_MAX_SIZE` loses its least recently used entries (a read refreshes
  an entry's modification time) down to 15/16 of the bound. Its bytes are kept in a ledger beside the entries
  (`.ember-size`, updated under a lock by each write), so a folder is walked only to evict (once per 1/16 of the bound
  written), to count it when the ledger is missing, and once a day to remove the temps of killed writers: a long-used
  cache holds ~10^5 entries, ~0.6 s to count, which every process's first step paid when each counted it.

    folder = cache_folder("compile")              # None: no cache (CACHE=0 is the caller's business)
    write_entry(folder / key, key, lib, {"kind": "library"})
    entry = read_entry(folder / key, key)          # Entry(meta, payload) or None
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import stat
import tempfile
import threading
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from ember.uops import settings

try:
    import fcntl
except ImportError:  # (no advisory locks: the ledger is updated unlocked)
    fcntl = None  # type: ignore[assignment]

TEMP_MARK = ".ember-tmp-"  # in the name of every temp this module makes: what remove_stale_temps looks for
ENTRY_MAGIC = b"EMBER-CACHE-ENTRY 1\n"
_MAX_HEADER = 1 << 20  # bytes of the JSON header line, at most


class UnsafeFolderError(PermissionError):
    """A cache folder another user could write (or that is not a folder of this user): refused."""


# *** folders ***
def _check_private(path: Path) -> None:
    st = os.stat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafeFolderError(f"{path} is not a folder")
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        raise UnsafeFolderError(f"{path} is owned by uid {st.st_uid}, not by this user (uid {os.getuid()})")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise UnsafeFolderError(f"{path} is writable by group or others (mode {stat.S_IMODE(st.st_mode):04o}); "
                                f"`chmod go-w {path}` or set EMBER_CACHE_DIR to a private folder")


def make_private_folder(path: str | os.PathLike[str]) -> Path:
    """`path` as a folder of this user that nobody else can write: missing folders (parents too) are created with mode
    0700 whatever the umask (as ssh and pip do); an existing one is checked. Raises UnsafeFolderError when it is not
    ours or group/others can write it, OSError when it cannot be created."""
    path = Path(path).expanduser()
    missing: list[Path] = []
    p = path
    while not p.exists() and p != p.parent:
        missing.append(p)
        p = p.parent
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=0o700)
        except FileExistsError:
            continue  # made by a concurrent process; checked below like any existing folder
        os.chmod(folder, 0o700)  # mkdir's mode is masked by the umask
    _check_private(path)
    return path


_warned: set[str] = set()
_warned_lock = threading.Lock()
_used: set[Path] = set()  # cache folders this process has used
# cache_folder's folders (and their roots) once made and checked, by the setting and name that gave them: a later call
# checks the two again (the same checks, from one stat each) instead of walking and making the path
_checked: dict[tuple[str, str, str | None], tuple[Path, Path]] = {}


def _warn_once(where: str, message: str) -> None:
    with _warned_lock:
        if where in _warned:
            return
        _warned.add(where)
    warnings.warn(message, stacklevel=3)


def cache_folder(name: str) -> Path | None:
    """The folder of cache `name` under `cache_root()` (`EMBER_CACHE_DIR`, default ~/.cache/ember), made private if
    missing; None, with a warning, when the root or the folder is refused (see make_private_folder) or cannot be made:
    the caller then works without that cache. The first use in a process removes the temps killed writers left."""
    raw = settings.EMBER_CACHE_DIR.value
    key = (raw, name, os.environ.get("HOME") if raw.startswith("~") else None)
    if (known := _checked.get(key)) is not None:  # (a warm first step asks ~130 times: two stats, not the whole way)
        try:
            _check_private(known[0])
            _check_private(known[1])
            return known[1]
        except OSError:  # removed or changed since: made and checked again below
            _checked.pop(key, None)
    root = settings.cache_root()
    try:
        make_private_folder(root)
        folder = make_private_folder(root / name)
    except OSError as e:  # UnsafeFolderError included
        _warn_once(f"{root / name} {e}", f"ember cache: cannot write or trust {root / name} ({e}); running without "
                                     "this cache")
        return None
    _checked[key] = (root, folder)
    with _warned_lock:
        first_use = folder not in _used
        _used.add(folder)
    if first_use:  # once per process: the ledger read, the daily sweep of killed writers' temps
        _account(folder, 0)
    return folder


# *** atomic writes ***
def _temp_prefix(target: Path) -> str:
    return f".{target.name}.{os.getpid()}{TEMP_MARK}"


def _fsync_folder(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems cannot fsync a folder; the rename is still atomic
    finally:
        os.close(fd)


def make_temp(target: str | os.PathLike[str]) -> tuple[int, Path]:
    """An open temp file (fd, path) beside `target`, named as this module's temps, for a writer that streams into it
    over time; the writer fsyncs it and calls `replace_atomic`, or removes it. If its process dies, the next
    `remove_stale_temps` of the folder removes it."""
    target = Path(target)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=_temp_prefix(target), suffix=".tmp")
    return fd, Path(tmp)


def replace_atomic(tmp: str | os.PathLike[str], target: str | os.PathLike[str]) -> None:
    """Rename the (written, fsynced) temp `tmp` over `target` and make the rename durable."""
    os.replace(tmp, target)
    _fsync_folder(Path(target).parent)


def _umask() -> int:
    """The process's umask, read without changing it where Linux shows it (setting it to read it back would briefly
    loosen the mode of files other threads create)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o077)  # (the strictest value while it is being read)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike[str], mode: str = "wb", *, file_mode: int | None = None,
                durable: bool = True, **kwargs: Any) -> Iterator[IO[Any]]:
    """A file whose contents replace `path` when the block exits cleanly (flushed, fsynced, renamed); on an exception
    the temp is removed and `path` is untouched. `file_mode` sets the file's permissions (default: as the umask
    gives, like `open`). `durable=False` skips the fsyncs: readers still see the old or the new whole, but a crash
    of the machine may lose the write or leave a torn file (for cache entries, whose reads verify them).

        with atomic_open(path, "w") as f:
            f.write(text)"""
    if "w" not in mode:
        raise ValueError(f"atomic_open: mode must write ('w' or 'wb'), got {mode!r}")
    target = Path(path)
    folder = target.parent
    if not folder.is_dir():
        raise FileNotFoundError(f"folder {str(folder)!r} of {str(target)!r} does not exist")
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=_temp_prefix(target), suffix=".tmp")
    try:
        os.chmod(tmp, file_mode if file_mode is not None else 0o666 & ~_umask())  # (mkstemp makes 0600)
        with os.fdopen(fd, mode, **kwargs) as f:
            yield f
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    if durable:
        _fsync_folder(folder)


def atomic_write(path: str | os.PathLike[str], data: bytes | str, *, file_mode: int | None = None,
                 durable: bool = True) -> None:
    """Replace `path` by `data` (a str is written as UTF-8) atomically; see atomic_open."""
    with atomic_open(path, "wb", file_mode=file_mode, durable=durable) as f:
        f.write(data.encode("utf-8") if isinstance(data, str) else data)


@contextlib.contextmanager
def atomic_folder(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A temp folder beside `path` to fill; when the block exits cleanly its files are fsynced and it replaces `path`
    (an existing `path` is removed first); on an exception it is removed and `path` is untouched.

        with atomic_folder(ckpt_dir / "step_00000010") as tmp:
            (tmp / "state.json").write_text(...)"""
    target = Path(path)
    if not target.parent.is_dir():
        raise FileNotFoundError(f"folder {str(target.parent)!r} of {str(target)!r} does not exist")
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=_temp_prefix(target)))
    try:
        yield tmp
        for f in tmp.rglob("*"):
            if f.is_file():
                with open(f, "rb") as fh:
                    os.fsync(fh.fileno())
        _fsync_folder(tmp)
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _fsync_folder(target.parent)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: alive
    return True


def remove_stale_temps(folder: str | os.PathLike[str]) -> list[Path]:
    """Remove the temps (files and folders) that writes of this module left in `folder` when their process died (a
    killed checkpoint write); a temp of a live process is kept. Returns what was removed."""
    removed: list[Path] = []
    try:
        entries = list(os.scandir(folder))
    except (FileNotFoundError, NotADirectoryError):
        return removed
    for e in entries:
        if not e.name.startswith(".") or TEMP_MARK not in e.name:
            continue
        pid_text = e.name[:e.name.index(TEMP_MARK)].rsplit(".", 1)[-1]
        if pid_text.isdigit() and int(pid_text) != os.getpid() and _pid_alive(int(pid_text)):
            continue
        if pid_text.isdigit() and int(pid_text) == os.getpid():
            continue  # one of this process's writes in flight
        path = Path(e.path)
        if e.is_dir(follow_symlinks=False):
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        removed.append(path)
    return removed


# *** cache entries ***
@dataclass(frozen=True)
class Entry:
    """A verified cache entry: the writer's `meta` (JSON data) and the payload bytes."""

    meta: dict[str, Any]
    payload: bytes


def encode_entry(key: str, payload: bytes, meta: dict[str, Any] | None = None) -> bytes:
    """The bytes of a cache entry (see the module doc)."""
    header = {"key": key, "size": len(payload), "sha256": hashlib.sha256(payload).hexdigest(), "meta": meta or {}}
    return ENTRY_MAGIC + json.dumps(header, sort_keys=True, separators=(",", ":")).encode() + b"\n" + payload


def decode_entry(data: bytes, key: str) -> Entry:
    """The entry in `data` when it is well formed and written for `key`; else ValueError saying what is wrong."""
    if not data.startswith(ENTRY_MAGIC):
        raise ValueError("not an Ember cache entry (no magic line)")
    end = data.find(b"\n", len(ENTRY_MAGIC), len(ENTRY_MAGIC) + _MAX_HEADER)
    if end < 0:
        raise ValueError("no header line")
    try:
        header = json.loads(data[len(ENTRY_MAGIC):end])
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"the header is not JSON ({e})") from None
    if not isinstance(header, dict) or not isinstance(header.get("meta"), dict):
        raise ValueError("the header is not an entry header")
    if header.get("key") != key:
        raise ValueError(f"it was written for the key {str(header.get('key'))[:80]!r}, not {key[:80]!r}")
    payload = data[end + 1:]
    if header.get("size") != len(payload):
        raise ValueError(f"the payload has {len(payload)} bytes, the header says {header.get('size')!r}")
    if header.get("sha256") != hashlib.sha256(payload).hexdigest():
        raise ValueError("the payload does not match its sha256 (edited or corrupt)")
    return Entry(header["meta"], payload)


def _read_bytes(path: Path) -> bytes:
    """The file's bytes (Path.read_bytes without its io object: ~3x less time for the small entries read by the
    hundred in a first step)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        chunks: list[bytes] = []
        want = os.fstat(fd).st_size + 1  # (the whole file in one read, then the one that sees its end)
        while chunk := os.read(fd, want):
            chunks.append(chunk)
            want = 1 << 20
    finally:
        os.close(fd)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def read_entry(path: str | os.PathLike[str], key: str, legacy: tuple[bytes, ...] = ()) -> Entry | None:
    """The verified entry at `path` written for `key`, or None: no entry, or one that fails verification (a warning;
    the file is deleted so that the caller's rebuild replaces it). A file that starts with one of the `legacy` magics
    (a cache's older format) is deleted with one warning per folder. A hit counts as a use for the LRU bound."""
    path = Path(path)
    try:
        data = _read_bytes(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as e:
        warnings.warn(f"ember cache: cannot read {path}: {e}", stacklevel=2)
        return None
    if legacy and data.startswith(legacy):
        _warn_once(f"legacy {path.parent}", f"ember cache: {path.parent} holds entries of an older format (e.g. "
                                            f"{path.name}); they are not trusted, deleted and built again")
        path.unlink(missing_ok=True)
        return None
    try:
        entry = decode_entry(data, key)
    except ValueError as e:
        warnings.warn(f"ember cache: {path} is corrupt or unreadable ({e}); deleting it and building it again",
                      stacklevel=2)
        path.unlink(missing_ok=True)
        return None
    with contextlib.suppress(OSError):
        os.utime(path)  # most recently used
    return entry


def write_entry(path: str | os.PathLike[str], key: str, payload: bytes, meta: dict[str, Any] | None = None,
                durable: bool = True) -> bool:
    """Write a cache entry atomically (mode 0600), then keep its folder within `EMBER_CACHE_MAX_SIZE`. A cache that
    cannot be written is a warning, not an error: returns whether the entry was written. `durable=False`: no fsync
    (an entry cheap to rebuild; one a machine crash tore fails verification on read and is rebuilt)."""
    path = Path(path)
    try:
        atomic_write(path, encode_entry(key, payload, meta), file_mode=0o600, durable=durable)
    except OSError as e:
        warnings.warn(f"ember cache: cannot write {path}: {e}", stacklevel=2)
        return False
    _account(path.parent, path.stat().st_size if path.exists() else 0)
    return True


# *** the size bound ***
LEDGER = ".ember-size"  # in each cache folder: {"bytes": what its entries take, "swept": when its temps were swept}
SWEEP_EVERY_S = 24 * 3600.0
_TRIM_TO = 15 / 16  # an eviction goes down to this share of the bound: a full folder is walked once per 1/16 written


def source_fingerprint(label: str, *folders: Path) -> str:
    """The hash of `label` and every `*.py` file in `folders` (named by folder and file, sorted)."""
    h = hashlib.sha256(label.encode())
    for folder in folders:
        for f in sorted(folder.glob("*.py")):
            h.update(f"{folder.name}/{f.name}".encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


def folder_size(folder: Path) -> int:
    """The bytes of the regular files directly in `folder` (temps included)."""
    total = 0
    with contextlib.suppress(FileNotFoundError):
        for e in os.scandir(folder):
            with contextlib.suppress(OSError):
                if e.is_file(follow_symlinks=False):
                    total += e.stat(follow_symlinks=False).st_size
    return total


def _account(folder: Path, written: int) -> None:
    """Add `written` bytes (0: a first use) to the ledger of `folder`, under its lock (processes share the folder); walk
    the folder when the ledger is missing or unreadable at a write (count it), when the bytes go over the bound (evict)
    and when the last sweep of dead writers' temps is a day old. The ledger can only run high (an entry rewritten, one
    deleted as corrupt): each eviction sets it to what it counted."""
    cap = settings.EMBER_CACHE_MAX_SIZE.value
    try:  # (a first use that reads only makes no ledger: the first write counts the folder)
        fd = os.open(folder / LEDGER, os.O_RDWR | (os.O_CREAT if written else 0), 0o600)
    except OSError:
        return  # (no ledger yet, or a folder that cannot be written: the entry's own write warned)
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            state = json.loads(os.pread(fd, 256, 0))
            size, swept = int(state["bytes"]), float(state["swept"])
        except (ValueError, KeyError, TypeError):
            size, swept = None, 0.0
        now = time.time()
        if now - swept > SWEEP_EVERY_S:
            remove_stale_temps(folder)
            swept = now
        if size is None or size + written > cap:
            size, _ = _trim(folder, cap, int(cap * _TRIM_TO))
        elif written == 0 and swept != now:
            return  # nothing to record
        else:
            size += written
        data = json.dumps({"bytes": size, "swept": swept}).encode()
        os.pwrite(fd, data, 0)
        os.ftruncate(fd, len(data))  # (a shorter record than the last leaves no tail)
    except OSError:
        pass
    finally:
        os.close(fd)  # (and the lock with it)


def _is_entry(name: str) -> bool:
    """Whether a file of a cache folder is an entry: not its ledger, not the temp of a write in flight."""
    return name != LEDGER and not (name.startswith(".") and TEMP_MARK in name)


def _trim(folder: Path, max_bytes: int, to_bytes: int) -> tuple[int, list[Path]]:
    """One walk over `folder`: the bytes of its entries, and when they are over `max_bytes`, the least recently used
    entries (oldest modification time first) deleted until at most `to_bytes` are left; the most recently used entry
    is kept even when it alone is larger. Returns the bytes left and the deleted paths."""
    files: list[tuple[float, int, Path]] = []
    with contextlib.suppress(FileNotFoundError):
        for e in os.scandir(folder):
            if not _is_entry(e.name):
                continue
            with contextlib.suppress(OSError):
                if e.is_file(follow_symlinks=False):
                    st = e.stat(follow_symlinks=False)
                    files.append((st.st_mtime, st.st_size, Path(e.path)))
    total = sum(size for _, size, _ in files)
    deleted: list[Path] = []
    if total <= max_bytes:
        return total, deleted
    files.sort()
    for _, size, path in files[:-1]:
        if total <= to_bytes:
            break
        path.unlink(missing_ok=True)
        total -= size
        deleted.append(path)
    return total, deleted


def entries(folder: str | os.PathLike[str]) -> list[Path]:
    """The entries of a cache folder, by name: its files but the ledger and the temps of writes."""
    with contextlib.suppress(FileNotFoundError):
        return sorted(Path(e.path) for e in os.scandir(folder)
                      if e.is_file(follow_symlinks=False) and _is_entry(e.name))
    return []


def evict(folder: str | os.PathLike[str], max_bytes: int) -> list[Path]:
    """Delete the least recently used entries of `folder` (oldest modification time first) until its files take at
    most `max_bytes` (the most recently used entry is kept even when it alone is larger). Returns the deleted paths;
    the folder's ledger is counted again at its next write."""
    folder = Path(folder)
    _, deleted = _trim(folder, max_bytes, max_bytes)
    with contextlib.suppress(OSError):
        (folder / LEDGER).unlink()
    return deleted


__all__ = ["TEMP_MARK", "ENTRY_MAGIC", "UnsafeFolderError", "make_private_folder", "cache_folder", "atomic_open",
           "atomic_write", "atomic_folder", "make_temp", "replace_atomic", "remove_stale_temps", "Entry",
           "encode_entry", "decode_entry", "read_entry", "write_entry", "source_fingerprint", "folder_size",
           "entries", "evict", "LEDGER", "SWEEP_EVERY_S"]
