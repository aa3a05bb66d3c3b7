"""Training over several devices of one process: data parallel (--dp, the batch rows split, the gradients allreduced),
ZeRO-1 (--zero) and tensor parallel (--mp, Megatron's split, the vocabulary padded) give the losses of one device;
checkpoints saved by any layout load into any other."""

import numpy as np
import pytest

from ember.mlperf_llama.config import TrainConfig
from ember.mlperf_llama.model import Llama, padded_vocab_size, preset
from ember.mlperf_llama.train import Trainer, local_devices, train
from ember.tensor import Tensor

# the sums of a reduce split over devices run in another order than on one device: equal to float32 rounding
RTOL = 1e-5


def config(tmp, **kw) -> TrainConfig:
    base = dict(layers=1, fake_data=True, batch_size=4, grad_acc_steps=2, seq_len=32, lr=1e-2, warmup_samples=4,
                train_samples=24, eval_every=16, eval_samples=6, eval_batch_size=4, eval_target=0.01,
                progress=False, cache_dir=str(tmp / "cache"))
    return TrainConfig(**(base | kw))


@pytest.fixture(scope="module")
def one_device(tmp_path_factory):
    return train(config(tmp_path_factory.mktemp("one")))


@pytest.mark.parametrize("layout", [{"dp": 2}, {"dp": 4}, {"dp": 2, "zero": True}, {"mp": 2}],
                         ids=["dp2", "dp4", "dp2-zero", "mp2"])
def test_layouts_train_as_one_device(one_device, tmp_path, layout):
    result = train(config(tmp_path, **layout))
    assert len(result.losses) == len(one_device.losses) == 3
    np.testing.assert_allclose(result.losses, one_device.losses, rtol=RTOL)
    assert [s for s, _ in result.evals] == [s for s, _ in one_device.evals] == [16, 24]
    # (6 eval sequences in batches of 4: the short last batch is replicated, not split, under dp)
    np.testing.assert_allclose([e for _, e in result.evals], [e for _, e in one_device.evals], rtol=RTOL)


def test_the_trainer_places_the_model_and_the_batch():
    dp = Trainer(TrainConfig(layers=1, batch_size=4, seq_len=8, dp=2, zero=True, fake_data=True))
    assert dp.devices == ("CPU", "CPU:1")
    wq = dp.model.layers[0].attention.wq.weight
    assert wq.device == dp.devices and wq.shard_axis is None  # replicated
    tokens = dp.place(np.zeros((4, 9), np.int32))
    assert tokens.device == dp.devices and tokens.shard_axis == 0
    assert dp.place(np.zeros((3, 9), np.int32)).shard_axis is None  # 3 rows do not split over 2 devices
    # ZeRO-1: each device holds half of the (padded) moments of a replicated group
    m = dp.opt.m[0]
    assert m.shard_axis == 0 and m.uop.src[0].shape[0] * 2 == dp.opt.groups[0].flat.numel()
    mp = Trainer(TrainConfig(layers=1, batch_size=2, seq_len=8, mp=2, fake_data=True))
    a, f = mp.model.layers[0].attention, mp.model.layers[0].feed_forward  # column, row, column, row parallel
    assert [w.weight.shard_axis for w in (a.wq, a.wo, f.w1, f.w2)] == [0, 1, 0, 1]
    assert mp.model.output.weight.shard_axis == 0 and mp.model.tok_embeddings.weight.shard_axis is None
    assert mp.place(np.zeros((2, 9), np.int32)).shard_axis is None  # the batch is replicated
    assert local_devices("CPU:2", 3) == ("CPU:2", "CPU:3", "CPU:4")


@pytest.mark.parametrize("first, second", [({"dp": 2, "zero": True}, {"mp": 2}), ({"mp": 2}, {}),
                                           ({}, {"dp": 2})], ids=["dp-zero->mp", "mp->one", "one->dp"])
def test_a_checkpoint_resumes_in_another_layout(one_device, tmp_path, first, second):
    ckpt = str(tmp_path / "ckpt")
    train(config(tmp_path, train_samples=16, checkpoint_dir=ckpt, checkpoint_every=1, **first))
    resumed = train(config(tmp_path, checkpoint_dir=ckpt, resume=True, **second))
    # steps 1-2 ran in the first layout; step 3 continues from its checkpoint like the one-device run
    np.testing.assert_allclose(resumed.losses, one_device.losses[2:], rtol=RTOL)
    np.testing.assert_allclose(resumed.evals[-1][1], one_device.evals[-1][1], rtol=RTOL)


def test_tensor_parallel_pads_the_vocabulary_and_masks_it():
    assert [padded_vocab_size(300, mp) for mp in (1, 2, 4)] == [300, 512, 1024]
    assert padded_vocab_size(128_256, 8) == 129_024  # the 8B vocabulary over 8 devices: 63 blocks of 2048
    cfg = preset("tiny", n_layers=1, dim=64, n_heads=4, n_kv_heads=2, ffn_dim=128, vocab_size=300, max_seq_len=16)
    tokens = np.random.default_rng(0).integers(0, 300, (2, 9))
    one = Llama(cfg, seed=0)
    loss = one.loss(Tensor(tokens))
    loss.backward()
    mp = Llama(cfg, seed=0)
    devices = ("CPU", "CPU:1")
    mp.shard(devices, "mp")
    assert mp.output.weight.shape == (512, 64) and mp.output.weight.shard_axis == 0
    logits = mp(Tensor(tokens[:, :-1]).to(devices)).numpy()
    assert logits.shape == (2, 8, 512) and (logits[..., 300:] == -1e9).all()  # the pad columns never win
    np.testing.assert_allclose(logits[..., :300], one(Tensor(tokens[:, :-1])).numpy(), rtol=1e-4, atol=1e-5)
    mp_loss = mp.loss(Tensor(tokens).to(devices))
    mp_loss.backward()
    assert mp_loss.item() == pytest.approx(loss.item(), rel=RTOL)
    for (name, p), q in zip(one.named_parameters().items(), mp.parameters()):
        grad = q.grad.numpy()
        np.testing.assert_allclose(grad[:p.shape[0]], p.grad.numpy(), rtol=1e-4, atol=1e-6, err_msg=name)
        assert not grad[p.shape[0]:].any(), name  # the pad rows of the head get no gradient
    # the checkpoint form is whole and unpadded, and loads back into either layout
    state = mp.checkpoint_state()
    assert state["output.weight"].shape == (300, 64) and state["output.weight"].device == "CPU"
    one.load_checkpoint_state(state)
    np.testing.assert_array_equal(one.output.weight.numpy(), mp.output.weight.numpy()[:300])


def test_bad_layouts_are_refused():
    cfg = preset("tiny", n_layers=1, dim=64, n_heads=4, n_kv_heads=2, ffn_dim=128, vocab_size=300, max_seq_len=16)
    with pytest.raises(ValueError, match=r"needs n_kv_heads \(2\) to be a multiple of 4"):
        Llama(cfg, seed=0).shard(("CPU", "CPU:1", "CPU:2", "CPU:3"), "mp")
    model = Llama(cfg, seed=0)
    model.shard(("CPU", "CPU:1"), "dp")
    with pytest.raises(ValueError, match="already on"):
        model.shard(("CPU", "CPU:1"), "dp")
    with pytest.raises(ValueError, match=r"tokens are on CPU, the model on \('CPU', 'CPU:1'\)"):
        model(Tensor(np.zeros((2, 4), np.int32)))
    with pytest.raises(ValueError, match="mode must be 'dp' or 'mp'"):
        Llama(cfg, seed=0).shard(("CPU", "CPU:1"), "pp")
