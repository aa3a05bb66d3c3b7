"""State dicts and safetensors, both ways with the `safetensors` library (PyTorch tensors), bf16 included."""

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from ember.tensor import Tensor, dtypes
from ember.tensor.nn import get_parameters, get_state_dict, load_state_dict, safe_load, safe_load_metadata, safe_save


class Block:
    def __init__(self):
        self.w = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
        self.layers = [Tensor(np.ones(3, np.float32)), {"bias": Tensor(np.zeros(2, np.int32))}]


def test_state_dict_walks_attributes():
    b = Block()
    sd = get_state_dict(b)
    assert list(sd) == ["w", "layers.0", "layers.1.bias"]
    assert len(get_parameters(b)) == 3


def test_load_state_dict_strict_and_shapes():
    b = Block()
    load_state_dict(b, {"w": Tensor(np.full((2, 3), 7.0, np.float32)), "layers.0": Tensor(np.zeros(3, np.float32)),
                        "layers.1.bias": Tensor(np.ones(2, np.int32))})
    np.testing.assert_array_equal(b.w.numpy(), np.full((2, 3), 7.0))
    with pytest.raises(ValueError, match=r"missing keys \['layers.0', 'layers.1.bias'\], unexpected keys \['x'\]"):
        load_state_dict(b, {"w": b.w, "x": b.w})
    with pytest.raises(ValueError, match=r"'w' has shape \(3, 2\) in the state, \(2, 3\) in the model"):
        load_state_dict(b, {"w": Tensor.ones(3, 2)}, strict=False)


def test_ours_load_in_torch_and_back(tmp_path):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((4, 5)).astype(np.float32)
    ours = {"a": Tensor(a), "h": Tensor(a.astype(np.float16)), "i": Tensor(np.arange(7, dtype=np.int64)),
            "b": Tensor(a, dtype=dtypes.bfloat16), "flag": Tensor(np.array([True, False])), "empty": Tensor.ones(0, 3)}
    safe_save(ours, tmp_path / "m.safetensors", metadata={"format": "pt"})
    theirs = load_file(str(tmp_path / "m.safetensors"))
    np.testing.assert_array_equal(theirs["a"].numpy(), a)
    np.testing.assert_array_equal(theirs["h"].numpy(), a.astype(np.float16))
    np.testing.assert_array_equal(theirs["i"].numpy(), np.arange(7))
    assert theirs["b"].dtype == torch.bfloat16
    np.testing.assert_array_equal(theirs["b"].float().numpy(), torch.tensor(a).bfloat16().float().numpy())
    assert theirs["flag"].tolist() == [True, False] and tuple(theirs["empty"].shape) == (0, 3)
    back = safe_load(tmp_path / "m.safetensors")
    np.testing.assert_array_equal(back["a"].numpy(), a)
    np.testing.assert_array_equal(back["b"].float().numpy(), theirs["b"].float().numpy())


def test_torch_files_load_here(tmp_path):
    t = {"w": torch.randn(3, 4), "bf": torch.randn(5).bfloat16(), "n": torch.arange(6, dtype=torch.int32).reshape(2, 3)}
    save_file(t, str(tmp_path / "t.safetensors"))
    got = safe_load(tmp_path / "t.safetensors", device="PYTHON")
    np.testing.assert_array_equal(got["w"].numpy(), t["w"].numpy())
    np.testing.assert_array_equal(got["bf"].float().numpy(), t["bf"].float().numpy())
    np.testing.assert_array_equal(got["n"].numpy(), t["n"].numpy())
    assert got["w"].device == "PYTHON"


def test_corrupt_files_are_refused(tmp_path):
    p = tmp_path / "x.safetensors"
    safe_save({"a": Tensor.ones(4)}, p)
    raw = p.read_bytes()
    (tmp_path / "short").write_bytes(raw[:5])
    with pytest.raises(ValueError, match="too short for a header"):
        safe_load(tmp_path / "short")
    (tmp_path / "trunc").write_bytes(raw[:-4])
    with pytest.raises(ValueError, match="do not fit shape"):
        safe_load(tmp_path / "trunc")
    (tmp_path / "json").write_bytes(raw[:8] + b"[" + raw[9:])
    with pytest.raises(ValueError, match="not valid JSON|bad entry"):
        safe_load_metadata(tmp_path / "json")
    (tmp_path / "big").write_bytes((10**9).to_bytes(8, "little") + raw[8:])
    with pytest.raises(ValueError, match="runs past the end"):
        safe_load(tmp_path / "big")


def test_save_is_atomic_and_checks_types(tmp_path):
    p = tmp_path / "m.safetensors"
    safe_save({"a": Tensor.ones(2)}, p)
    with pytest.raises(TypeError, match="'b' is a list, not a Tensor"):
        safe_save({"a": Tensor.ones(2), "b": [1, 2]}, p)
    assert list(safe_load(p)) == ["a"]  # the old file is intact
    assert [x.name for x in tmp_path.iterdir()] == ["m.safetensors"]  # no temp file left behind


def test_save_refuses_names_that_are_not_strings(tmp_path):
    for name in (1, None, "__metadata__"):
        with pytest.raises(TypeError, match="tensor names must be strings"):
            safe_save({name: Tensor([1.0])}, tmp_path / "x.safetensors")
    assert not (tmp_path / "x.safetensors").exists()


def test_load_state_dict_replaces_a_layers_init_without_computing_it():
    from ember.tensor import engine, nn

    class Model:
        def __init__(self):
            self.a, self.b, self.emb = nn.Linear(8, 4), nn.Linear(8, 4, bias=False), nn.Embedding(10, 8)
    schedules = engine.ENGINE.schedule_count
    m = Model()
    assert engine.ENGINE.schedule_count == schedules  # a layer's init is lazy
    rng = np.random.default_rng(0)
    values = {k: rng.standard_normal(t.shape).astype(np.float32) for k, t in get_state_dict(m).items()}
    state = {k: Tensor(v) for k, v in values.items()}
    load_state_dict(m, state)
    assert engine.ENGINE.schedule_count == schedules + 1  # every copy in one schedule, no init kernel
    for k, t in get_state_dict(m).items():
        np.testing.assert_array_equal(t.numpy(), values[k])
    state["a.weight"].assign(Tensor.zeros(4, 8)).realize()  # the model holds copies, not the state's tensors
    np.testing.assert_array_equal(m.a.weight.numpy(), values["a.weight"])
    load_state_dict(m, {k: Tensor(v + 1) for k, v in values.items()})  # realized now: loaded in place
    np.testing.assert_array_equal(m.emb.weight.numpy(), values["emb.weight"] + 1)


def test_a_lazy_init_takes_its_draw_when_the_layer_is_built():
    from ember.tensor import nn

    Tensor.manual_seed(3)
    first = nn.Linear(5, 3)
    Tensor.manual_seed(3)
    second = nn.Linear(5, 3)
    Tensor.rand(7).realize()  # another draw realized between building the layer and computing its init
    np.testing.assert_array_equal(second.weight.numpy(), first.weight.numpy())
    assert np.abs(first.weight.numpy()).max() <= 1 / np.sqrt(5) and first.weight.numpy().std() > 0
