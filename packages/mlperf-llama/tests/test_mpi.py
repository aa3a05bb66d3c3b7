"""Data parallel over MPI ranks: `World` without MPI, and `ember-llama train --dp 2` under `mpirun -np 2` (the losses,
evaluation and weights of a one-process run with the same global batch; rank 0 alone logs; a failing or killed rank
ends the job). Every mpirun is bounded by a timeout."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from ember.mlperf_llama import train as train_module
from ember.mlperf_llama.config import TrainConfig
from ember.mlperf_llama.data import IndexedDatasetWriter
from ember.mlperf_llama.distributed import World
from ember.tensor import Tensor, dtypes

needs_mpirun = pytest.mark.skipif(shutil.which("mpirun") is None,
                                  reason="Open MPI's mpirun is not installed (.ci/run installs openmpi-bin)")

MPIRUN_TIMEOUT = 180  # seconds: a cold kernel cache compiles the step on 2 cores; a hang fails the test here
FAILURE_BOUND = 60  # seconds from launch until a job with a failing rank has ended

# Runs `ember-llama train` (cli.main) as one rank and saves what the run did to OUT/rank<r>.json (+ rank 0's weights);
# EMBER_TEST_FAIL=raise|kill makes rank 1 raise or SIGKILL itself when step 2 starts.
DRIVER = '''
import hashlib, json, os, signal, sys
import numpy as np
from ember.mlperf_llama import cli
from ember.mlperf_llama import train as train_module

trainers, results = [], []
class Recording(train_module.Trainer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        trainers.append(self)
def recording_train(*args, **kwargs):
    results.append(original_train(*args, **kwargs))
    return results[-1]
original_train, train_module.Trainer, train_module.train = train_module.train, Recording, recording_train
rank, fail = int(os.environ["OMPI_COMM_WORLD_RANK"]), os.environ.get("EMBER_TEST_FAIL")
if rank == 1 and fail:
    schedule = train_module.learning_rate
    def failing(step, *args):
        if step == 2 and fail == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if step == 2:
            raise RuntimeError("injected failure")
        return schedule(step, *args)
    train_module.learning_rate = failing
code = cli.main(sys.argv[2:])
trainer = trainers[0]
params = {k: p.numpy() for k, p in sorted(trainer.model.named_parameters().items())}
digest = hashlib.sha256(b"".join(p.tobytes() for p in params.values())).hexdigest()
out = sys.argv[1]
if rank == 0:
    np.savez(f"{out}/weights.npz", **params)
with open(f"{out}/rank{rank}.json", "w") as f:
    json.dump({"code": code, "losses": results[0].losses, "evals": results[0].evals, "hash": digest,
               "grad_norm": trainer.opt.grad_norm.item()}, f)
'''


# *** World without MPI ***
def test_a_plain_run_is_a_world_of_one_without_mpi4py(monkeypatch):
    monkeypatch.setitem(sys.modules, "mpi4py", None)  # importing it would fail
    for env in ({}, {"OMPI_COMM_WORLD_SIZE": "1", "OMPI_COMM_WORLD_RANK": "0"}, {"PMI_SIZE": "1"}):
        world = World.from_environment(env)
        assert (world.rank, world.size, world.is_root, world.comm) == (0, 1, True, None)
    world = World()
    grads = np.arange(6, dtype=np.float32)
    assert world.allreduce_sum_(grads) is grads and grads.tolist() == [0, 1, 2, 3, 4, 5]
    assert world.sum([1.5, 2]) == [1.5, 2.0] and world.mean(3.25) == 3.25 and world.broadcast({"a": 1}) == {"a": 1}
    world.barrier()
    with world.root_first():
        pass
    batch = np.arange(8).reshape(4, 2)
    assert world.shard_rows(batch) is not None and (world.shard_rows(batch) == batch).all()
    with pytest.raises(RuntimeError, match="propagates"), world.abort_on_error("test"):
        raise RuntimeError("propagates in a world of one")
    with pytest.raises(TypeError, match="C-contiguous"):
        world.allreduce_sum_(np.zeros((4, 4), np.float32)[:, 1])


def test_rows_are_contiguous_shares_that_cover_the_batch():
    for size in (1, 2, 3, 4):
        for rows in (0, 1, 5, 8):
            ranges = [World(rank, size).row_range(rows) for rank in range(size)]
            assert ranges[0][0] == 0 and ranges[-1][1] == rows
            assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
    assert [World(rank, 2).row_range(8) for rank in range(2)] == [(0, 4), (4, 8)]  # r*B/W:(r+1)*B/W
    assert World(1, 2).shard_rows(np.arange(6)).tolist() == [3, 4, 5]


@pytest.mark.parametrize("env", [{"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "1"},
                                 {"PMI_SIZE": "4", "PMI_RANK": "0"}])
def test_a_launch_without_mpi4py_says_how_to_install_it(monkeypatch, env):
    monkeypatch.setitem(sys.modules, "mpi4py", None)
    with pytest.raises(ImportError, match=r"pip install 'ember-mlperf-llama\[mpi\]'.*Open MPI must be installed"):
        World.from_environment(env)


def test_dp_must_be_a_multiple_of_the_ranks_and_the_rest_are_local_devices():
    with pytest.raises(ValueError, match=r"TrainConfig.dp: must be a multiple of the number of MPI ranks \(2\), got 3"):
        train_module.Trainer(TrainConfig(layers=1, batch_size=6, dp=3, fake_data=True), World(0, 2))
    trainer = train_module.Trainer(TrainConfig(layers=1, batch_size=8, dp=4, fake_data=True), World(1, 2))
    assert trainer.devices == ("CPU", "CPU:1")  # dp 4 over 2 ranks: 2 devices in each


class _TwinWorld(World):
    """Two ranks holding the same values, without MPI: the sum doubles."""

    def allreduce_sum_(self, array: np.ndarray) -> np.ndarray:
        array *= 2
        return array


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_gradient_allreduce_writes_the_flat_gradient_buffers_in_place(dtype):
    cfg = TrainConfig(layers=1, batch_size=2, seq_len=8, dp=2, dtype=dtype, fake_data=True, progress=False)
    trainer = train_module.Trainer(cfg, _TwinWorld(0, 2))
    groups = trainer.opt.groups
    values = [np.arange(g.flat_grad.numel()) % 64 / 8 - 4 for g in groups]  # exact in bfloat16
    Tensor.realize_all(*[g.flat_grad.assign(Tensor(v.astype(np.float32)).cast(g.flat_grad.dtype))
                         for g, v in zip(groups, values)])
    for _ in range(3):  # the read and write steps are jitted: eager, capture, replay
        trainer.allreduce_gradients()
    for g, v in zip(groups, values):
        assert g.flat_grad.dtype == (dtypes.bfloat16 if dtype == "bfloat16" else dtypes.float32)
        np.testing.assert_array_equal(g.flat_grad.float().numpy(), v * 8)
        p = g.params[0]  # each parameter's .grad is still its view of the buffer
        np.testing.assert_array_equal(p.grad.float().numpy().ravel(), v[:p.numel()] * 8)


# *** mpirun ***
def mpirun(np_: int, argv: list[str], env: dict[str, str], timeout: float) -> tuple[int, str, float]:
    """Run `mpirun -np N argv` on this machine over loopback TCP; (exit code, stdout + stderr, seconds). A run past
    `timeout` is killed with its whole process group and fails the test."""
    command = ["mpirun", "-np", str(np_), "--oversubscribe", "--bind-to", "none", "--mca", "btl", "self,tcp",
               "--mca", "btl_tcp_if_include", "lo", *argv]
    full_env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
                "OMP_NUM_THREADS": "1", **env}
    start = time.monotonic()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=full_env,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"mpirun did not end within {timeout} s (a hang); output:\n{out[-4000:]}")
    return proc.returncode, out, time.monotonic() - start


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    """Megatron train/validation files of token documents that follow a pattern (learnable), ids < 4096."""
    root = tmp_path_factory.mktemp("mpi_data")
    rng = np.random.default_rng(0)
    for name, docs in (("train", 60), ("valid", 12)):
        with IndexedDatasetWriter(root / name, "uint16") as writer:
            for _ in range(docs):
                start, n = int(rng.integers(200)), int(rng.integers(30, 90))
                writer.add_document((start + np.arange(n) * 7) % 211 + 3)
    return root


TRAIN_ARGS = ["--layers", "1", "--batch-size", "4", "--grad-acc-steps", "2", "--seq-len", "32", "--train-prefix",
              "train", "--valid-prefix", "valid", "--lr", "1e-2", "--warmup-samples", "8", "--train-samples", "32",
              "--eval-every", "16", "--eval-samples", "5", "--eval-batch-size", "2", "--eval-target", "0.01",
              "--no-progress", "--log-mlperf", "-", "--seed", "1234"]  # the CLI draws a fresh seed unless given


@needs_mpirun
@pytest.mark.parametrize("dp", [2, 4])  # 4: two CPU devices in each rank, the rank's rows split over them
def test_two_ranks_train_as_one_process_with_the_same_global_batch(data_dir, tmp_path, monkeypatch, dp):
    driver, out = tmp_path / "driver.py", tmp_path / "out"
    driver.write_text(DRIVER)
    out.mkdir()
    argv = ["train", "--data-dir", str(data_dir), "--cache-dir", str(tmp_path / "cache"), *TRAIN_ARGS, "--dp", str(dp)]
    code, output, seconds = mpirun(2, [sys.executable, str(driver), str(out), *argv], {}, MPIRUN_TIMEOUT)
    assert code == 0, output[-4000:]
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]

    trainers = []

    class Recording(train_module.Trainer):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            trainers.append(self)

    monkeypatch.setattr(train_module, "Trainer", Recording)
    cfg = TrainConfig(data_dir=str(data_dir), cache_dir=str(tmp_path / "cache"), layers=1, batch_size=4,
                      grad_acc_steps=2, seq_len=32, train_prefix="train", valid_prefix="valid", lr=1e-2,
                      warmup_samples=8, train_samples=32, eval_every=16, eval_samples=5, eval_batch_size=2,
                      eval_target=0.01, progress=False)  # TRAIN_ARGS, in one process
    one = train_module.train(cfg)
    assert len(one.losses) == 4 and [s for s, _ in one.evals] == [16, 32]

    for rank in ranks:  # every rank reports the global figures; the sums run in another order: not bit-equal
        assert rank["code"] == 0
        np.testing.assert_allclose(rank["losses"], one.losses, rtol=1e-5)
        assert [s for s, _ in rank["evals"]] == [16, 32]
        np.testing.assert_allclose([e for _, e in rank["evals"]], [e for _, e in one.evals], rtol=1e-5)
        # the gradient is the global batch's (not twice it, not one rank's): AdamW alone would hide a scale
        assert rank["grad_norm"] == pytest.approx(trainers[0].opt.grad_norm.item(), rel=1e-4)
    assert ranks[0]["hash"] == ranks[1]["hash"]  # every rank took the same steps
    weights = np.load(out / "weights.npz")
    for name, p in trainers[0].model.named_parameters().items():
        # (Adam steps of ~lr = 1e-2 per element: a wrong gradient is off by that much; sum orders by ~1e-6)
        np.testing.assert_allclose(weights[name], p.numpy(), rtol=1e-4, atol=1e-5, err_msg=name)

    mllog = [json.loads(x.split(":::MLLOG ", 1)[1]) for x in output.splitlines() if ":::MLLOG " in x]
    keys = [x["key"] for x in mllog]
    assert keys.count("run_start") == keys.count("run_stop") == keys.count("init_start") == 1  # rank 0 alone
    assert [x["value"] for x in mllog if x["key"] == "eval_accuracy"] == [e for _, e in ranks[0]["evals"]]
    assert len([x for x in output.splitlines() if x.startswith('{"status": ')]) == 1  # the summary line, rank 0's
    assert output.count("validation log-perplexity") == 2 and f"dp {dp} over 2 MPI rank(s)" in output


@needs_mpirun
@pytest.mark.parametrize("failure", ["raise", "kill"])
def test_a_failing_rank_ends_the_job(data_dir, tmp_path, failure):
    driver, out = tmp_path / "driver.py", tmp_path / "out"
    driver.write_text(DRIVER)
    out.mkdir()
    argv = ["train", "--data-dir", str(data_dir), "--cache-dir", str(tmp_path / "cache"), *TRAIN_ARGS, "--dp", "2"]
    code, output, seconds = mpirun(2, [sys.executable, str(driver), str(out), *argv], {"EMBER_TEST_FAIL": failure},
                                   FAILURE_BOUND)
    assert code != 0 and seconds < FAILURE_BOUND, output[-4000:]
    assert not list(out.glob("rank*.json")), "a rank finished the run"
    if failure == "raise":
        assert "RuntimeError: injected failure" in output
        assert "ember-llama train: rank 1 of 2 failed (RuntimeError: injected failure); aborting all ranks" in output
    else:
        assert "signal 9" in output, output[-4000:]
