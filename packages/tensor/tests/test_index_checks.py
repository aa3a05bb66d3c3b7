"""Out-of-range ids (issue 15): embedding, gather, scatter, index_select, one_hot, the cross-entropy labels and int
indexing raise where PyTorch does (the same exception class, a message naming the op, the id and the valid range)
when the ids are known on the host; ids computed on the device are checked only under CHECK_INDICES=1 (a lazy result
is never waited for to check it), and then everywhere."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ember.tensor import Tensor, nn, realize
from ember.uops import settings

W = np.arange(5 * 3, dtype=np.float32).reshape(5, 3)
LOGITS = np.linspace(-1, 1, 4 * 5, dtype=np.float32).reshape(4, 5)

# (name, ours(ids), torch's(ids), an id out of range, the message fragment)
CASES = [
    ("embedding", lambda i: nn.embedding(i, Tensor(W)), lambda i: F.embedding(i, torch.tensor(W)),
     [0, 5], r"embedding: index 5 is out of range for a vocabulary of 5 \(valid: 0 to 4"),
    ("embedding negative", lambda i: nn.embedding(i, Tensor(W)), lambda i: F.embedding(i, torch.tensor(W)),
     [-1, 2], r"embedding: index -1 is out of range"),
    ("gather", lambda i: Tensor(W).gather(1, i.reshape(1, -1)), lambda i: torch.tensor(W).gather(1, i.reshape(1, -1)),
     [0, 3], r"gather: index 3 is out of range for dim 1 of size 3"),
    ("index_select", lambda i: Tensor(W).index_select(0, i), lambda i: torch.tensor(W).index_select(0, i),
     [7], r"index_select: index 7 is out of range for dim 0 of size 5"),
    ("scatter", lambda i: Tensor(W).scatter(1, i.reshape(1, -1), 1.0),
     lambda i: torch.tensor(W).scatter(1, i.reshape(1, -1), 1.0), [4], r"scatter: index 4 is out of range"),
    ("one_hot", lambda i: i.one_hot(3), lambda i: F.one_hot(i, 3), [0, 3],
     r"one_hot: class index 3 is out of range for num_classes 3"),
    ("one_hot negative", lambda i: i.one_hot(3), lambda i: F.one_hot(i, 3), [-2, 1],
     r"one_hot: class index -2 is out of range"),
    ("cross_entropy", lambda i: Tensor(LOGITS).cross_entropy(i), lambda i: F.cross_entropy(torch.tensor(LOGITS), i),
     [0, 1, 5, 2], r"cross_entropy: target index 5 is out of range for 5 classes"),
    ("nll_loss", lambda i: Tensor(LOGITS).nll_loss(i), lambda i: F.nll_loss(torch.tensor(LOGITS), i),
     [0, -3, 1, 2], r"nll_loss: target index -3 is out of range"),
    ("sparse_categorical_crossentropy", lambda i: Tensor(LOGITS).sparse_categorical_crossentropy(i),
     lambda i: F.cross_entropy(torch.tensor(LOGITS), i), [0, 1, 9, 2],
     r"sparse_categorical_crossentropy: label index 9 is out of range for 5 classes"),
    ("index_add", lambda i: Tensor(W).index_add(0, i, Tensor(W[:len(i)])),
     lambda i: torch.tensor(W).index_add(0, i, torch.tensor(W[:len(i)])), [1, 6],
     r"index_add: index 6 is out of range"),
    ("index_copy", lambda i: Tensor(W).index_copy(0, i, Tensor(W[:len(i)])),
     lambda i: torch.tensor(W).index_copy(0, i, torch.tensor(W[:len(i)])), [5], r"index_copy: index 5 is out of range"),
    ("take", lambda i: Tensor(W).take(i), lambda i: torch.tensor(W).take(i), [3, 15],
     r"index 15 is out of range for dim 0 of size 15"),
    ("getitem", lambda i: Tensor(W)[i], lambda i: torch.tensor(W)[i], [0, 5],
     r"index 5 is out of range for dim 0 of size 5"),
    ("getitem negative", lambda i: Tensor(W)[:, i], lambda i: torch.tensor(W)[:, i], [-4],
     r"index -4 is out of range for dim 1 of size 3"),
]


def torch_error(fn, ids):
    with pytest.raises(Exception) as info:
        fn(torch.tensor(ids))
    return type(info.value)


@pytest.mark.parametrize("name, ours, theirs, ids, message", CASES, ids=[c[0] for c in CASES])
def test_host_ids_out_of_range_raise_as_torch(name, ours, theirs, ids, message):
    # the class PyTorch raises (IndexError or RuntimeError), at the call (no realize), naming op, id and range
    with pytest.raises(torch_error(theirs, ids), match=message):
        ours(Tensor(np.array(ids, np.int64)))
    with pytest.raises(IndexError, match=message):  # an IndexError in every case
        ours(Tensor(ids))


@pytest.mark.parametrize("name, ours, theirs, ids, message", CASES, ids=[c[0] for c in CASES])
def test_in_range_ids_equal_torch(name, ours, theirs, ids, message):
    good = [min(max(i, 0), 2) for i in ids]  # in range for every case above (the smallest range is 3)
    got, want = ours(Tensor(good)), theirs(torch.tensor(good))
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, atol=1e-6)


def test_ignored_labels_are_not_out_of_range():
    labels = [0, -100, 4, -100]
    got = Tensor(LOGITS).cross_entropy(Tensor(labels))
    want = F.cross_entropy(torch.tensor(LOGITS), torch.tensor(labels))
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)
    Tensor(LOGITS).sparse_categorical_crossentropy(Tensor([0, -1, 4, 1])).realize()  # its ignore_index is -1
    with pytest.raises(IndexError, match="sparse_categorical_crossentropy: label index -100 is out of range"):
        Tensor(LOGITS).sparse_categorical_crossentropy(Tensor(labels))


def test_views_and_copies_of_host_ids():
    ids = Tensor([-1, 0, 4, 9])
    # a view of a host buffer holding bad ids elsewhere: its own values decide
    np.testing.assert_array_equal(nn.embedding(ids[1:3], Tensor(W)).numpy(), W[[0, 4]])
    with pytest.raises(IndexError, match="embedding: index 9"):
        nn.embedding(ids.reshape(2, 2)[1:], Tensor(W))
    with pytest.raises(IndexError, match="embedding: index -1"):
        nn.embedding(ids.to("PYTHON")[:2], Tensor(W, device="PYTHON"))
    with pytest.raises(IndexError, match="embedding: index 7"):
        nn.embedding(Tensor.full((2,), 7), Tensor(W))  # a constant
    with pytest.raises(IndexError, match="embedding: index 9"):
        nn.embedding(Tensor(np.array([1, 9], np.int64)).int(), Tensor(W))  # an int cast that keeps the values
    wrapped = Tensor(np.array([1, 300], np.int64)).cast("uint8")  # 300 wraps to 44: not known on the host
    assert realize.host_range(wrapped.uop) is None


def test_device_ids_unchecked_by_default_and_never_synced():
    ids = Tensor([1, 2]) + 4  # lazy: 5, 6
    out = nn.embedding(ids, Tensor(W))
    assert not realize.is_realized(ids.uop)  # the check did not compute the ids
    np.testing.assert_array_equal(out.numpy(), np.zeros((2, 3), np.float32))  # (out of range: rows of zeros)


@pytest.mark.parametrize("name, ours, theirs, ids, message", CASES, ids=[c[0] for c in CASES])
def test_checked_mode_validates_device_ids(name, ours, theirs, ids, message, monkeypatch):
    monkeypatch.setenv("CHECK_INDICES", "1")
    lazy = Tensor(np.zeros(len(ids), np.int64)) + Tensor(ids)  # computed on the device
    assert realize.host_range(lazy.uop) is None
    with pytest.raises(torch_error(theirs, ids), match=message):
        ours(lazy)
    good = Tensor(np.zeros(len(ids), np.int64)) + Tensor([min(max(i, 0), 2) for i in ids])
    ours(good).realize()


def test_checked_mode_flag_in_context():
    lazy = Tensor([3]) * 3
    with settings.Context(CHECK_INDICES=True), pytest.raises(IndexError, match="embedding: index 9"):
        nn.embedding(lazy, Tensor(W))
    nn.embedding(lazy, Tensor(W)).realize()  # off again


def test_written_buffers_forget_their_host_values():
    ids = Tensor([0, 9]).realize()
    ids.assign(ids * 0).realize()  # now 0, 0: in range, and no longer the host data
    np.testing.assert_array_equal(nn.embedding(ids, Tensor(W)).numpy(), W[[0, 0]])
    ids.assign(ids + 6).realize()  # 6, 6: unknown on the host now, found on the device when checked
    with settings.Context(CHECK_INDICES=True), pytest.raises(IndexError, match="embedding: index 6"):
        nn.embedding(ids, Tensor(W))
