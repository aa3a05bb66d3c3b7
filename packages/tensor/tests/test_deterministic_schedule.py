"""A schedule is a pure function of the program: the same tensors, made in the same order, give the same kernel order
and the same buffer sharing in every process, whatever its string hash seed or memory layout."""

import json
import os
import subprocess
import sys

# A model's parameter init: independent random kernels, and equal lazy values (hash-consed `ones`/`zeros`, like norm
# weights) that must each get a buffer of their own. Prints the first schedule's kernels (structural hashes, in
# order) and which buffers they share (numbered by first use). `pad` objects made first shift the heap's addresses.
_CHILD = """
import hashlib, json, sys
pad = [object() for _ in range(int(sys.argv[1]))]
import ember.schedule
from ember.tensor import Tensor

original, schedules = ember.schedule.schedule, []
def recording(*args, **kwargs):
    schedules.append(original(*args, **kwargs))
    return schedules[-1]
for mod in list(sys.modules.values()):
    if getattr(mod, "schedule", None) is original:
        mod.schedule = recording

def graph_hash(root):
    nodes = root.toposort()
    index = {u: i for i, u in enumerate(nodes)}
    text = repr([(u.op.name, repr(u.dtype), repr(u.arg), tuple(index[s] for s in u.src)) for u in nodes])
    return hashlib.sha256(text.encode()).hexdigest()[:16]

params = []
for _ in range(6):
    params += [Tensor.rand(16, 16), Tensor.ones(16).contiguous(), Tensor.randn(16, 8), Tensor.zeros(16).contiguous()]
Tensor.realize_all(*params)
sched, numbers = schedules[0], {}
print(json.dumps({"kernels": [graph_hash(it.ast) for it in sched.items],
                  "buffers": [[numbers.setdefault(b, len(numbers)) for b in it.bufs] for it in sched.items]}))
"""


def _fingerprint(hash_seed: int, pad: int) -> dict[str, list]:
    env = {**os.environ, "PYTHONHASHSEED": str(hash_seed), "CODEGEN_WORKERS": "0"}
    res = subprocess.run([sys.executable, "-c", _CHILD, str(pad)], env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_schedule_same_across_processes():
    first, *others = [_fingerprint(hash_seed, pad) for hash_seed, pad in ((0, 0), (1, 1), (2, 5))]
    assert len(first["kernels"]) == 24  # one kernel per parameter
    for other in others:
        assert other == first
