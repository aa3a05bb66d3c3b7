"""ember.uops.files: private cache folders, atomic writes, verified cache entries, the LRU size bound."""

import json
import os
import pickle
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from ember.uops import files, settings


@pytest.fixture(autouse=True)
def cache_root(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv("EMBER_CACHE_DIR", str(root))
    monkeypatch.delenv("EMBER_CACHE_MAX_SIZE", raising=False)
    return root


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


# *** atomic writes ***
def test_atomic_write_replaces_and_a_failure_keeps_the_old_file(tmp_path):
    path = tmp_path / "state.json"
    files.atomic_write(path, "old\n")
    with pytest.raises(RuntimeError, match="crash"):
        with files.atomic_open(path, "w") as f:
            f.write("half-writ")
            raise RuntimeError("crash")
    assert path.read_text() == "old\n" and sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]
    files.atomic_write(path, b"new")
    assert path.read_bytes() == b"new"
    with pytest.raises(FileNotFoundError, match="does not exist"):
        files.atomic_write(tmp_path / "missing" / "x", "y")
    with pytest.raises(ValueError, match="mode must write"):
        with files.atomic_open(path, "r"):
            pass


def test_atomic_write_gives_the_mode_open_would(tmp_path):
    old = os.umask(0o027)
    try:
        files.atomic_write(tmp_path / "a", b"x")
    finally:
        os.umask(old)
    assert mode(tmp_path / "a") == 0o640
    files.atomic_write(tmp_path / "b", b"x", file_mode=0o600)
    assert mode(tmp_path / "b") == 0o600


def test_atomic_folder_replaces_whole_or_not_at_all(tmp_path):
    target = tmp_path / "step_00000001"
    with files.atomic_folder(target) as tmp:
        (tmp / "a.txt").write_text("one")
    assert (target / "a.txt").read_text() == "one"
    with pytest.raises(KeyError):
        with files.atomic_folder(target) as tmp:
            (tmp / "a.txt").write_text("two")
            raise KeyError("killed")
    assert (target / "a.txt").read_text() == "one" and sorted(p.name for p in tmp_path.iterdir()) == [target.name]
    with files.atomic_folder(target) as tmp:
        (tmp / "b.txt").write_text("two")
    assert sorted(p.name for p in target.iterdir()) == ["b.txt"]


def test_stale_temps_of_dead_processes_are_removed(tmp_path):
    # a process killed in the middle of a checkpoint write leaves its temp folder and file behind
    script = ("import os, sys\nfrom ember.uops import files\n"
              f"with files.atomic_folder({str(tmp_path / 'step_1')!r}) as tmp:\n"
              "    (tmp / 'model').write_bytes(b'x' * 100)\n"
              f"    with files.atomic_open({str(tmp_path / 'latest')!r}) as f:\n"
              "        f.write(b'half')\n"
              "        os._exit(9)\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True)
    assert proc.returncode == 9, proc.stderr
    left = sorted(p.name for p in tmp_path.iterdir() if p.name != "cache")
    assert len(left) == 2 and all(files.TEMP_MARK in n for n in left)
    mine = tmp_path / f".x.{os.getpid()}{files.TEMP_MARK}abc"
    mine.write_text("a write of this process in flight")
    removed = files.remove_stale_temps(tmp_path)
    assert sorted(p.name for p in removed) == left
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "cache") == [mine.name]
    assert files.remove_stale_temps(tmp_path / "nowhere") == []


# *** folders ***
def test_folders_are_made_0700_whatever_the_umask(cache_root):
    old = os.umask(0)
    try:
        folder = files.cache_folder("compile")
    finally:
        os.umask(old)
    assert folder == cache_root / "compile"
    assert mode(cache_root) == 0o700 and mode(folder) == 0o700
    deep = cache_root.parent / "a" / "b" / "c"
    old = os.umask(0)
    try:
        files.make_private_folder(deep)
    finally:
        os.umask(old)
    assert mode(deep) == mode(deep.parent) == mode(deep.parent.parent) == 0o700


@pytest.mark.parametrize("bits", [0o770, 0o777, 0o722, 0o1777])
def test_a_folder_others_can_write_is_refused_with_a_warning(cache_root, bits):
    cache_root.mkdir()
    os.chmod(cache_root, bits)
    with pytest.warns(UserWarning, match="writable by group or others"):
        assert files.cache_folder("program") is None
    assert not (cache_root / "program").exists()
    os.chmod(cache_root, 0o700)
    (cache_root / "beam").mkdir()
    os.chmod(cache_root / "beam", bits)
    with pytest.warns(UserWarning, match="running without this cache"):
        assert files.cache_folder("beam") is None


def test_a_folder_of_another_user_is_refused(cache_root, monkeypatch):
    cache_root.mkdir(mode=0o700)
    monkeypatch.setattr(os, "getuid", lambda: os.stat(cache_root).st_uid + 1)
    with pytest.raises(files.UnsafeFolderError, match="not by this user"):
        files.make_private_folder(cache_root)
    with pytest.warns(UserWarning, match="not by this user"):
        assert files.cache_folder("compile") is None


def test_a_folder_checked_once_is_checked_again_at_each_use(cache_root):
    folder = files.cache_folder("compile")
    assert files.cache_folder("compile") == folder  # (the remembered folder)
    shutil.rmtree(folder)
    assert files.cache_folder("compile") == folder and folder.is_dir() and mode(folder) == 0o700  # made again
    os.chmod(folder, 0o777)
    with pytest.warns(UserWarning, match="writable by group or others"):
        assert files.cache_folder("compile") is None
    os.chmod(folder, 0o700)
    os.chmod(cache_root, 0o777)
    with pytest.warns(UserWarning, match="writable by group or others"):
        assert files.cache_folder("compile") is None


def test_a_cache_root_that_is_a_file_is_a_warning(cache_root):
    cache_root.write_text("a file")
    with pytest.warns(UserWarning, match="cannot write"):
        assert files.cache_folder("compile") is None


# *** entries ***
def test_an_entry_round_trips_and_is_verified_against_its_key(tmp_path):
    path = tmp_path / "k1"
    assert files.write_entry(path, "k1", b"\x00payload\xff", {"kind": "library"})
    assert mode(path) == 0o600
    entry = files.read_entry(path, "k1")
    assert entry == files.Entry({"kind": "library"}, b"\x00payload\xff")
    with pytest.warns(UserWarning, match="written for the key 'k1'"):
        assert files.read_entry(path, "k2") is None
    assert not path.exists()  # deleted: the caller rebuilds it



@pytest.mark.parametrize("durable", [True, False])
def test_a_durable_write_is_fsynced_a_cache_entry_need_not_be(tmp_path, monkeypatch, durable):
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd) or real_fsync(fd))
    assert files.write_entry(tmp_path / "k1", "k1", b"payload", durable=durable)
    assert files.read_entry(tmp_path / "k1", "k1") == files.Entry({}, b"payload")
    assert len(synced) == (2 if durable else 0)  # the file and its folder
    assert [p.name for p in tmp_path.iterdir() if p.name != files.LEDGER] == ["k1"]  # renamed into place: no temp

@pytest.mark.parametrize(("edit", "why"), [
    (lambda d: d[:-1] + bytes([d[-1] ^ 1]), "sha256"),  # an edited payload, header intact
    (lambda d: d[:-3], "payload has"),  # truncated
    (lambda d: d.replace(b'"size":8', b'"size":9'), "payload has"),
    (lambda d: d[5:], "no magic"),
    (lambda d: files.ENTRY_MAGIC + b"{not json\n", "not JSON"),
    (lambda d: files.ENTRY_MAGIC + b"[1, 2]\n", "not an entry header"),
    (lambda d: files.ENTRY_MAGIC + b"no newline", "no header line"),
])
def test_an_edited_or_broken_entry_is_rejected(tmp_path, edit, why):
    path = tmp_path / "key"
    files.write_entry(path, "key", b"12345678")
    path.write_bytes(edit(path.read_bytes()))
    with pytest.warns(UserWarning, match=why):
        assert files.read_entry(path, "key") is None
    assert not path.exists()


class _Planted:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))  # unpickling this creates the marker file


def test_a_planted_pickle_never_executes(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "key"
    path.write_bytes(pickle.dumps(_Planted(str(marker))))
    with pytest.warns(UserWarning, match="no magic"):
        assert files.read_entry(path, "key") is None
    # a well-formed header in front of a pickle is returned as bytes, never loaded
    files.write_entry(path, "key", pickle.dumps(_Planted(str(marker))))
    assert isinstance(files.read_entry(path, "key").payload, bytes)
    assert not marker.exists()


def test_a_legacy_entry_is_deleted_with_one_warning(tmp_path):
    (tmp_path / "a").write_bytes(b"EMBC" + b"\0" * 50)
    (tmp_path / "b").write_bytes(b"EMBC" + b"\0" * 50)
    with pytest.warns(UserWarning, match="older format"):
        assert files.read_entry(tmp_path / "a", "a", legacy=(b"EMBC",)) is None
    assert files.read_entry(tmp_path / "b", "b", legacy=(b"EMBC",)) is None  # (warned once per folder)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_an_unwritable_entry_is_a_warning(tmp_path):
    with pytest.warns(UserWarning, match="cannot write"):
        assert not files.write_entry(tmp_path / "missing" / "key", "key", b"x")


# *** the size bound ***
def as_a_new_process():
    files._used.clear()
    files._checked.clear()


def entries_size(folder):
    return sum(p.stat().st_size for p in folder.iterdir() if p.name != files.LEDGER)


def test_the_cache_is_bounded_with_lru_eviction(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_CACHE_MAX_SIZE", "3000")
    folder = tmp_path / "bounded"
    folder.mkdir()
    for i in range(3):
        files.write_entry(folder / f"e{i}", f"e{i}", b"x" * 800)
        os.utime(folder / f"e{i}", (1000 + i, 1000 + i))
    assert files.read_entry(folder / "e0", "e0") is not None  # used now: e1 is the least recently used
    files.write_entry(folder / "e3", "e3", b"x" * 800)
    assert sorted(p.name for p in folder.iterdir() if p.name != files.LEDGER) == ["e0", "e2", "e3"]
    assert entries_size(folder) <= 3000 * 15 / 16  # (evicted below the bound: a walk per 1/16 of it written)
    # the most recent entry stays even when it alone is over the bound
    files.write_entry(folder / "big", "big", b"x" * 5000)
    assert sorted(p.name for p in folder.iterdir() if p.name != files.LEDGER) == ["big"]


def test_a_folder_is_walked_only_to_count_evict_or_sweep(cache_root, monkeypatch):
    # a long-used cache folder holds ~10^5 entries: a walk to count them (~0.6 s) on each process's first write to it,
    # and one to sweep temps on its first use, were a first step's to pay
    monkeypatch.setenv("EMBER_CACHE_MAX_SIZE", "3000")
    folder = cache_root / "walks"
    folder.mkdir(parents=True, mode=0o700)
    os.chmod(cache_root, 0o700)
    for i in range(3):
        (folder / f"old{i}").write_bytes(b"x" * 800)
        os.utime(folder / f"old{i}", (1000 + i, 1000 + i))
    stale = folder / f".key.{2 ** 22 + 4321}{files.TEMP_MARK}abc.tmp"
    stale.write_bytes(b"half an entry")
    walks, real_scandir = [], os.scandir

    def counted_scandir(path):
        if Path(path) == folder:
            walks.append(path)
        return real_scandir(path)
    monkeypatch.setattr(files.os, "scandir", counted_scandir)
    assert files.cache_folder("walks") == folder
    assert walks == [] and stale.exists()  # a use that only reads makes no ledger
    files.write_entry(folder / "a", "a", b"y" * 50)
    assert len(walks) == 2 and not stale.exists()  # no ledger yet: counted once, swept once
    assert files.cache_folder("walks") == folder
    files.write_entry(folder / "b", "b", b"y" * 50)
    assert len(walks) == 2  # the ledger counts the writes
    as_a_new_process()  # its first use reads the ledger, a sweep is a day away
    assert files.cache_folder("walks") == folder and len(walks) == 2
    files.write_entry(folder / "c", "c", b"y" * 300)  # over the bound: one walk evicts
    assert len(walks) == 3
    assert sorted(p.name for p in folder.iterdir() if p.name != files.LEDGER) == ["a", "b", "c", "old1", "old2"]
    assert json.loads((folder / files.LEDGER).read_bytes())["bytes"] == entries_size(folder) <= 3000 * 15 / 16
    (folder / files.LEDGER).write_bytes(b"not a ledger")  # unreadable: counted and swept again
    files.write_entry(folder / "d", "d", b"")
    assert len(walks) == 5 and json.loads((folder / files.LEDGER).read_bytes())["bytes"] > 0


@pytest.mark.parametrize(("raw", "value"), [("500", 500), ("2K", 2048), ("1.5M", 3 << 19), ("4G", 4 << 30),
                                            ("1GiB", 1 << 30), ("", 4 << 30)])
def test_max_size_setting(monkeypatch, raw, value):
    monkeypatch.setenv("EMBER_CACHE_MAX_SIZE", raw)
    assert settings.EMBER_CACHE_MAX_SIZE.value == value


def test_a_bad_max_size_names_the_variable(monkeypatch):
    monkeypatch.setenv("EMBER_CACHE_MAX_SIZE", "lots")
    with pytest.raises(ValueError, match=r"EMBER_CACHE_MAX_SIZE='lots': expected a size in bytes"):
        settings.EMBER_CACHE_MAX_SIZE.value  # noqa: B018


def test_a_cache_folder_loses_the_temps_of_killed_writers_once_a_day(cache_root):
    folder = cache_root / "sweep"
    folder.mkdir(parents=True, mode=0o700)
    os.chmod(cache_root, 0o700)
    stale = folder / f".key.{2 ** 22 + 4321}{files.TEMP_MARK}abc.tmp"  # a pid no process has
    stale.write_bytes(b"half an entry")
    assert files.cache_folder("sweep") == folder
    files.write_entry(folder / "k", "k", b"x")  # the first write: no ledger yet, the folder counted and swept
    assert not stale.exists()
    stale.write_bytes(b"half an entry")
    as_a_new_process()  # another process's first use, the same day
    assert files.cache_folder("sweep") == folder and stale.exists()
    ledger = json.loads((folder / files.LEDGER).read_bytes())
    ledger["swept"] -= files.SWEEP_EVERY_S + 1
    (folder / files.LEDGER).write_text(json.dumps(ledger))
    as_a_new_process()  # a day later
    assert files.cache_folder("sweep") == folder and not stale.exists()


def test_source_fingerprint_follows_the_label_and_every_source_file(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for folder in (a, b):
        folder.mkdir()
        (folder / "x.py").write_text("x = 1\n")
    (a / "notes.txt").write_text("not a source")
    first = files.source_fingerprint("v1", a, b)
    assert first == files.source_fingerprint("v1", a, b)
    (a / "notes.txt").write_text("edited, still not a source")
    assert files.source_fingerprint("v1", a, b) == first
    assert files.source_fingerprint("v2", a, b) != first
    assert files.source_fingerprint("v1", b, a) != first  # (a file is named by its folder too)
    (b / "x.py").write_text("x = 2\n")
    assert files.source_fingerprint("v1", a, b) != first
