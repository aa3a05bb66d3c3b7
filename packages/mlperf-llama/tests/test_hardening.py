"""Bad inputs to the trainer: malformed checkpoints and index caches, a file as --checkpoint-dir, a SEQLEN beyond
memory, NaN losses, a killed checkpoint write, --device without DEV: each refused (or repaired) with one clear line."""

import json
import os
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest

from ember.mlperf_llama import cli
from ember.mlperf_llama import train as train_mod
from ember.mlperf_llama.config import TrainConfig
from ember.mlperf_llama.data import GPTDataset, IndexedDatasetWriter
from ember.mlperf_llama.train import Trainer, clean_checkpoint_dir, load_checkpoint, train
from ember.tensor import Tensor, files


def tiny(tmp: Path, **kw) -> TrainConfig:
    base = dict(layers=1, fake_data=True, cache_dir=str(tmp / "cache"), batch_size=2, seq_len=16, lr=1e-3,
                warmup_samples=2, train_samples=4, eval_every=4, eval_samples=2, eval_batch_size=2, eval_target=0.01,
                progress=False)
    return TrainConfig(**(base | kw))


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("ckpt")
    train(tiny(tmp, checkpoint_dir=str(tmp / "ckpt"), checkpoint_every=2))
    return tmp / "ckpt"


@pytest.fixture
def broken(checkpoint, tmp_path) -> Path:
    """A copy of the checkpoint to break."""
    return Path(shutil.copytree(checkpoint, tmp_path / "ckpt"))


def step_dir(ckpt: Path) -> Path:
    return ckpt / (ckpt / "latest").read_text().strip()


def edit_header(path: Path, edit) -> None:
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    edit(header)
    head = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(head)) + head + data[8 + n:])


def first_2d(header) -> str:
    return next(k for k, v in header.items() if k != "__metadata__" and len(v["shape"]) == 2
                and v["shape"][0] != v["shape"][1])


def load(ckpt: Path, tmp: Path) -> None:
    load_checkpoint(ckpt, Trainer(tiny(tmp, checkpoint_dir=str(ckpt), resume=True)))


def test_the_checkpoint_loads(checkpoint, tmp_path):
    load(checkpoint, tmp_path)


@pytest.mark.parametrize(("edit", "match"), [
    (lambda h: h[first_2d(h)].update(dtype="F33"), r"model.safetensors: tensor '.*' has dtype 'F33', expected one of"),
    (lambda h: h[first_2d(h)].update(shape=h[first_2d(h)]["shape"][::-1]),
     r"model.safetensors: tensor '.*' has shape \(\d+, \d+\), expected \(\d+, \d+\)"),
    (lambda h: h[first_2d(h)].update(dtype="I32"), r"model.safetensors: tensor '.*' has dtype I32, expected a float"),
    (lambda h: h[first_2d(h)].update(data_offsets=[0, 8]), r"model.safetensors: '.*' has data_offsets \[0, 8\]"),
    (lambda h: h[first_2d(h)].update(data_offsets=[0, 8, 16]), r"tensor '.*' has data_offsets \[0, 8, 16\], expected"),
    (lambda h: h[first_2d(h)].update(data_offsets=["a", "b"]), r"has data_offsets \['a', 'b'\], expected"),
    (lambda h: h[first_2d(h)].update(shape=[-1, 4]), r"has shape \[-1, 4\], expected a list of integers >= 0"),
    (lambda h: h.pop(first_2d(h)), r"model.safetensors lacks the tensor"),
])
def test_a_malformed_model_file_is_refused_naming_file_and_tensor(broken, tmp_path, edit, match):
    edit_header(step_dir(broken) / "model.safetensors", edit)
    with pytest.raises(ValueError, match=match):
        load(broken, tmp_path)


def test_a_malformed_optimizer_file_is_refused(broken, tmp_path):
    edit_header(step_dir(broken) / "optimizer.safetensors",
                lambda h: h[next(k for k in h if k.startswith("m."))].update(dtype="I32"))
    with pytest.raises(ValueError, match=r"optimizer.safetensors: tensor 'm\..*' has dtype I32"):
        load(broken, tmp_path)


@pytest.mark.parametrize(("edit", "match"), [
    (lambda s: "{not json", r"state.json is not valid JSON"),
    (lambda s: json.dumps([1, 2]), r"state.json holds a list, expected a JSON object"),
    (lambda s: json.dumps({k: v for k, v in json.loads(s).items() if k != "config"}), r"state.json has no 'config'"),
    (lambda s: json.dumps(json.loads(s) | {"rng": [1]}), r"state.json has rng \[1\], expected \[seed, counter\]"),
    (lambda s: json.dumps(json.loads(s) | {"rng": ["a", -1]}), r"has rng \['a', -1\]"),
    (lambda s: json.dumps(json.loads(s) | {"step": -3}), r"has step -3, expected an integer >= 0"),
    (lambda s: json.dumps(json.loads(s) | {"format": 99}), r"has checkpoint format 99"),
    (lambda s: json.dumps(json.loads(s) | {"evals": "x"}), r"has evals x"),
])
def test_a_bad_state_json_is_refused(broken, tmp_path, edit, match):
    path = step_dir(broken) / "state.json"
    path.write_text(edit(path.read_text()))
    with pytest.raises(ValueError, match=match):
        load(broken, tmp_path)


def test_a_bad_latest_pointer_is_refused(broken, tmp_path):
    (broken / "latest").write_text("../../etc\n")
    with pytest.raises(ValueError, match="expected the name of a step_XXXXXXXX folder"):
        load(broken, tmp_path)
    (broken / "latest").write_text("step_00000099\n")
    with pytest.raises(FileNotFoundError, match="which is not a folder"):
        load(broken, tmp_path)


def test_the_cli_refuses_a_malformed_checkpoint_in_one_line(broken, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("DEBUG", raising=False)
    edit_header(step_dir(broken) / "model.safetensors", lambda h: h[first_2d(h)].update(dtype="I32"))
    cfg = tiny(tmp_path)
    args = ["train", "--layers", "1", "--fake-data", "--batch-size", "2", "--seq-len", "16", "--train-samples", "8",
            "--warmup-samples", "2", "--eval-samples", "2", "--eval-batch-size", "2", "--cache-dir", cfg.cache_dir,
            "--lr", "1e-3", "--checkpoint-dir", str(broken), "--resume", "--no-progress"]
    assert cli.main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and err[-1].startswith("ember-llama train: error: resume: ")  # (the banner, then the error)
    assert "model.safetensors" in err[-1] and "I32" in err[-1] and "Traceback" not in err[-1]


# *** the CLI's top level ***
def test_a_checkpoint_dir_that_is_a_file(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    assert cli.main(["train", "--fake-data", "--checkpoint-dir", str(blocker), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "is a file, not a folder" in err and "Traceback" not in err
    assert cli.main(["train", "--fake-data", "--checkpoint-dir", str(blocker / "sub"), "--no-progress"]) == 2
    assert "is a file, so the folder cannot be made" in capsys.readouterr().err


@pytest.mark.parametrize("debug", [["--debug"], ["DEBUG=1"], []])
def test_the_traceback_only_with_debug(tmp_path, capsys, monkeypatch, debug):
    monkeypatch.delenv("DEBUG", raising=False)
    if debug == ["DEBUG=1"]:
        monkeypatch.setenv("DEBUG", "1")
        debug = []
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    assert cli.main(["train", *debug, "--fake-data", "--checkpoint-dir", str(blocker)]) == 2
    err = capsys.readouterr().err
    traced = "Traceback (most recent call last)" in err
    assert traced == (debug != [] or os.environ.get("DEBUG") == "1")
    assert err.strip().splitlines()[-1].startswith("ember-llama train: error: --checkpoint-dir")


def test_seqlen_beyond_memory_is_refused_before_compiling(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("SEQLEN", "4000000")
    monkeypatch.setattr(train_mod, "Trainer", lambda *a, **k: pytest.fail("built the model"))
    assert cli.main(["train", "--fake-data", "--no-progress", "--cache-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "SEQLEN=4000000" in err and "lower SEQLEN or BS" in err and "GiB" in err


def test_nan_losses_stop_with_a_clear_message(tmp_path, capsys, monkeypatch):
    real_init = Trainer.__init__

    def diverging(self, *a, **k):
        real_init(self, *a, **k)
        self.micro_step = lambda tokens: [Tensor([float("nan")])]
        self.optimizer_step = lambda: Tensor([0.0])

    monkeypatch.setattr(Trainer, "__init__", diverging)
    ckpt = tmp_path / "ckpt"
    assert cli.main(["train", "--layers", "1", "--fake-data", "--batch-size", "2", "--seq-len", "16",
                     "--train-samples", "8", "--checkpoint-dir", str(ckpt), "--checkpoint-every", "1",
                     "--no-progress", "--cache-dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "the loss is nan at step 1" in err and "lower the learning rate" in err
    assert not (ckpt / "latest").exists()  # a diverged model is not checkpointed


def test_temps_of_a_killed_checkpoint_write_are_removed_at_start(tmp_path, monkeypatch, capsys):
    ckpt = tmp_path / "ckpt"
    (ckpt / "step_00000002").mkdir(parents=True)
    dead = 2 ** 22 + 12345  # no such process
    left = [ckpt / f".step_00000004.{dead}{files.TEMP_MARK}x1", ckpt / f".latest.{dead}{files.TEMP_MARK}x2.tmp",
            ckpt / ".step_00000006.k3j2a1"]  # (the last: a temp of the writer before ember.uops.files)
    left[0].mkdir()
    (left[0] / "model.safetensors").write_bytes(b"half")
    left[1].write_text("step_0000")
    left[2].mkdir()
    assert sorted(p.name for p in clean_checkpoint_dir(ckpt)) == sorted(p.name for p in left)
    assert sorted(p.name for p in ckpt.iterdir()) == ["step_00000002"]
    # and a run does it first thing, whatever happens next
    left[0].mkdir()
    monkeypatch.setenv("SEQLEN", "4000000")
    assert cli.main(["train", "--fake-data", "--checkpoint-dir", str(ckpt), "--cache-dir", str(tmp_path)]) == 2
    assert sorted(p.name for p in ckpt.iterdir()) == ["step_00000002"]


def test_device_flag_without_dev(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("DEV", raising=False)
    assert cli.main(["train", "--device", "CPU:1", "--layers", "1", "--fake-data", "--batch-size", "2",
                     "--seq-len", "16", "--train-samples", "2", "--warmup-samples", "2", "--eval-samples", "2",
                     "--eval-batch-size", "2", "--no-progress", "--cache-dir", str(tmp_path)]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["steps"] == 1


# *** the dataset index cache ***
@pytest.fixture
def dataset(tmp_path):
    from ember.mlperf_llama.data import IndexedDataset

    rng = np.random.default_rng(0)
    with IndexedDatasetWriter(tmp_path / "d", dtype=np.uint16) as w:
        for _ in range(50):
            w.add_document(rng.integers(0, 1000, int(rng.integers(5, 40))))
    return IndexedDataset(tmp_path / "d")


@pytest.mark.parametrize(("name", "corrupt"), [
    ("shuffle_index", np.zeros_like),
    ("sample_index", lambda a: a + 10 ** 6),
    ("document_index", lambda a: a[::-1].copy()),
])
def test_a_wrong_index_cache_is_detected_and_rebuilt(dataset, tmp_path, name, corrupt):
    first = GPTDataset(dataset, 16, 40, seed=3, cache_dir=tmp_path / "idx")
    path = first.cache_paths[name]
    np.save(path, corrupt(np.load(path)), allow_pickle=False)
    with pytest.warns(UserWarning, match="is rejected"):
        again = GPTDataset(dataset, 16, 40, seed=3, cache_dir=tmp_path / "idx")
    assert not again.loaded_from_cache
    np.testing.assert_array_equal(again.shuffle_index, first.shuffle_index)
    np.testing.assert_array_equal(again.sample_index, first.sample_index)
    assert [again[i].tolist() for i in range(5)] == [first[i].tolist() for i in range(5)]
    third = GPTDataset(dataset, 16, 40, seed=3, cache_dir=tmp_path / "idx")  # rewritten whole: a hit now
    assert third.loaded_from_cache


def test_an_index_cache_without_checksums_is_rebuilt(dataset, tmp_path):
    first = GPTDataset(dataset, 16, 40, seed=3, cache_dir=tmp_path / "idx")
    description = next((tmp_path / "idx").glob("*-description.json"))
    stored = json.loads(description.read_text())
    del stored["sha256"]
    description.write_text(json.dumps(stored))
    with pytest.warns(UserWarning, match="no checksums"):
        assert not GPTDataset(dataset, 16, 40, seed=3, cache_dir=tmp_path / "idx").loaded_from_cache
    assert first.cache_paths is not None


def test_an_index_cache_folder_others_can_write_is_not_used(dataset, tmp_path):
    folder = tmp_path / "idx"
    folder.mkdir()
    os.chmod(folder, 0o777)
    with pytest.warns(UserWarning, match="writable by group or others"):
        ds = GPTDataset(dataset, 16, 40, seed=3, cache_dir=folder)
    assert ds.cache_paths is None and list(folder.iterdir()) == []
    old = os.umask(0)
    try:
        GPTDataset(dataset, 16, 40, seed=3, cache_dir=tmp_path / "new")
    finally:
        os.umask(old)
    assert os.stat(tmp_path / "new").st_mode & 0o777 == 0o700


@pytest.mark.parametrize("argv", [["train", "--batch-size", "x"], [], ["train", "--nope"], ["eval", "--preset"]])
def test_a_bad_command_line_is_one_line(capsys, argv):
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "error:" in err[0] and "--help" in err[0]


def test_an_optimizer_file_without_the_moments_is_refused(broken, tmp_path):
    edit_header(step_dir(broken) / "optimizer.safetensors",
                lambda h: [h.pop(k) for k in [k for k in h if k.startswith("v.")]])
    with pytest.raises(ValueError, match=r"optimizer.safetensors lacks the tensor 'v\."):
        load(broken, tmp_path)


def test_eval_reads_checkpoint_dir_as_the_checkpoint(tmp_path, capsys, monkeypatch):
    # train's flag for the folder: eval ran the freshly initialized model and printed its loss (exit 0)
    monkeypatch.delenv("DEBUG", raising=False)
    empty = tmp_path / "no-checkpoints-here"
    empty.mkdir()
    assert cli.main(["eval", "--fake-data", "--checkpoint-dir", str(empty), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("ember-llama eval: error:") and "no checkpoint in" in err[-1] and str(empty) in err[-1]
