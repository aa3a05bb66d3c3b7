import pytest

from ember.mlperf_llama.atomic import atomic_open, write_atomic


def test_write_replaces_and_failure_keeps_the_old_file(tmp_path):
    path = tmp_path / "state.json"
    write_atomic(path, "old\n")
    with pytest.raises(RuntimeError, match="crash"):
        with atomic_open(path, "w") as f:
            f.write("half-writ")
            raise RuntimeError("crash")
    assert path.read_text() == "old\n" and sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]
    write_atomic(path, b"new")
    assert path.read_bytes() == b"new"
    with pytest.raises(FileNotFoundError, match="does not exist"):
        write_atomic(tmp_path / "missing" / "x", "y")
