"""ember.uops.settings: flags read from the environment when asked, validated, overridden by nested Contexts."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ember.uops import settings
from ember.uops.settings import BEAM, DEBUG, NOOPT, SPEC, Context, cache_root, environ


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in settings.FLAGS:
        monkeypatch.delenv(name, raising=False)


def test_defaults() -> None:
    assert (DEBUG.value, BEAM.value, NOOPT.value, SPEC.value, settings.CACHE.value) == (0, 0, False, False, True)


@pytest.mark.parametrize("raw", ["", "  "])
def test_empty_value_is_the_default(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv("DEBUG", raw)
    assert DEBUG.value == 0
    with Context(BEAM=1):
        assert environ()["DEBUG"] == raw and DEBUG.value == 0


def test_env_is_read_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEBUG", "3")
    assert DEBUG.value == 3
    monkeypatch.setenv("DEBUG", " 2 ")
    assert DEBUG.value == 2


@pytest.mark.parametrize(("name", "raw", "accepted"), [
    ("DEBUG", "x", "expected an integer >= 0"),
    ("DEBUG", "-1", "expected an integer >= 0"),
    ("BEAM", "2.5", "expected an integer >= 0"),
    ("NOOPT", "maybe", "expected 1/0, true/false, yes/no or on/off"),
])
def test_bad_value_names_the_variable(monkeypatch: pytest.MonkeyPatch, name: str, raw: str, accepted: str) -> None:
    monkeypatch.setenv(name, raw)
    with pytest.raises(ValueError, match=f"^{re.escape(f'{name}={raw!r}: {accepted}')}$"):
        _ = settings.FLAGS[name].value


@pytest.mark.parametrize(("raw", "value"), [("1", True), ("0", False), ("true", True), ("false", False),
                                            ("TRUE", True), ("False", False), ("yes", True), ("off", False)])
def test_booleans(monkeypatch: pytest.MonkeyPatch, raw: str, value: bool) -> None:
    monkeypatch.setenv("NOOPT", raw)
    assert NOOPT.value is value


def test_context_overrides_nests_and_restores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BEAM", "1")
    with Context(BEAM=2):
        assert BEAM.value == 2
        with Context(BEAM=4, NOOPT=True):
            assert (BEAM.value, NOOPT.value) == (4, True)
        assert (BEAM.value, NOOPT.value) == (2, False)
        with Context(DEBUG="3"):  # a raw string is parsed as the environment's would be
            assert (BEAM.value, DEBUG.value) == (2, 3)
    assert BEAM.value == 1


def test_context_restores_on_exception() -> None:
    with pytest.raises(RuntimeError, match="inside"):
        with Context(BEAM=2):
            with Context(BEAM=3):
                raise RuntimeError("inside")
    assert BEAM.value == 0 and "BEAM" not in environ()


def test_context_rejects_unknown_and_bad_values() -> None:
    with pytest.raises(ValueError, match=r"^Context: unknown setting 'BAEM'; known: BEAM, CACHE, CC, "):
        with Context(BAEM=2):
            pass
    with pytest.raises(ValueError, match=r"^Context: BEAM=-1: expected an integer >= 0$"):
        with Context(BEAM=-1):
            pass
    with pytest.raises(ValueError, match=r"^Context: NOOPT='maybe': expected 1/0"):
        with Context(NOOPT="maybe"):
            pass
    assert BEAM.value == 0  # nothing was left pushed


def test_environ_carries_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEBUG", "1")
    with Context(BEAM=3, NOOPT=True, DEBUG=2):
        with Context(NOOPT=False):
            env = environ()
    assert (env["BEAM"], env["NOOPT"], env["DEBUG"]) == ("3", "0", "2")
    assert environ()["DEBUG"] == "1" and "BEAM" not in environ()


def test_cache_root_follows_ember_cache_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert cache_root() == Path.home() / ".cache" / "ember"
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "c"))
    assert cache_root() == tmp_path / "c"
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("EMBER_CACHE_DIR", "~/elsewhere")
    assert cache_root() == tmp_path / "elsewhere"
    with Context(EMBER_CACHE_DIR=str(tmp_path / "ctx")):
        assert cache_root() == tmp_path / "ctx"


@pytest.mark.parametrize("raw, expect", [("3", 3), ("2,4", 2), ("", None), ("0", None), ("x", None)])
def test_omp_num_threads_reads_like_openmp(monkeypatch, raw, expect):
    monkeypatch.setenv("OMP_NUM_THREADS", raw)
    assert settings.OMP_NUM_THREADS.value == (expect or settings.usable_cores())


def test_usable_cores_follow_the_affinity(monkeypatch):
    monkeypatch.setattr(settings, "_cgroup_cpu_limit", lambda text, root: None)
    assert settings.usable_cores() == len(os.sched_getaffinity(0))
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 5, 7})
    assert settings.usable_cores() == 5
    assert settings.OMP_NUM_THREADS.value == 5 and settings.CODEGEN_WORKERS.value == 4
    monkeypatch.setattr(settings, "_cgroup_cpu_limit", lambda text, root: 1.5)  # a container's --cpus 1.5
    assert settings.usable_cores() == 2
    monkeypatch.setattr(settings, "_cgroup_cpu_limit", lambda text, root: 0.2)
    assert settings.usable_cores() == 1


def test_usable_cores_in_a_real_cpuset():
    # a child pinned to one core by the OS (taskset's syscall) sees one usable core
    code = "import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); " \
           "from ember.uops import settings; print(settings.usable_cores(), settings.OMP_NUM_THREADS.value)"
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["1", "1"]


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_cgroup_v2_quota_is_the_tightest_of_the_path(tmp_path):
    _write(tmp_path / "cpu.max", "max 100000\n")
    _write(tmp_path / "machine" / "cpu.max", "300000 100000\n")
    _write(tmp_path / "machine" / "job" / "cpu.max", "max 100000\n")
    assert settings._cgroup_cpu_limit("0::/machine/job\n", tmp_path) == 3.0
    _write(tmp_path / "machine" / "job" / "cpu.max", "150000 100000\n")
    assert settings._cgroup_cpu_limit("0::/machine/job\n", tmp_path) == 1.5
    assert settings._cgroup_cpu_limit("0::/\n", tmp_path) is None  # the root: no quota
    assert settings._cgroup_cpu_limit("0::/elsewhere\n", tmp_path) is None


def test_cgroup_v1_quota(tmp_path):
    text = "5:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n0::/\n"
    _write(tmp_path / "cpu,cpuacct" / "docker" / "abc" / "cpu.cfs_quota_us", "-1\n")
    _write(tmp_path / "cpu,cpuacct" / "docker" / "abc" / "cpu.cfs_period_us", "100000\n")
    assert settings._cgroup_cpu_limit(text, tmp_path) is None  # -1: no quota
    _write(tmp_path / "cpu,cpuacct" / "docker" / "abc" / "cpu.cfs_quota_us", "250000\n")
    assert settings._cgroup_cpu_limit(text, tmp_path) == 2.5


@pytest.mark.parametrize("raw, expect", [("", ""), ("passive", "passive"), ("ACTIVE", "active")])
def test_omp_wait_policy(monkeypatch, raw, expect):
    monkeypatch.setenv("OMP_WAIT_POLICY", raw)
    assert settings.OMP_WAIT_POLICY.value == expect


def test_omp_wait_policy_rejects_other_values(monkeypatch):
    monkeypatch.setenv("OMP_WAIT_POLICY", "spin")
    with pytest.raises(ValueError, match="OMP_WAIT_POLICY='spin': expected active or passive"):
        _ = settings.OMP_WAIT_POLICY.value
