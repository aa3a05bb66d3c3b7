"""Codegen's program cache entries read back and written again in-process: the tiny Llama step's programs.

    python tools/bench/bench_program_table.py --fill DIR     # run the first step with EMBER_CACHE_DIR=DIR (cold)
    python tools/bench/bench_program_table.py DIR [--runs 7]  # decode every program entry of DIR, encode it again

Decode: each entry's payload to a ProgramSpec (`program_from_json`) and its linear program (`spec.uops`, the lazily
decoded table), in a process that has not built those UOps (the first pass; later passes find them hash-consed).
Encode: `program_to_json` of each decoded program. Medians over `--runs` passes, and the function calls of a pass;
also the payload bytes and the Ops args seen (a reduce's arg read back as an int is counted apart).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

FILL = r"""
import numpy as np
from ember.mlperf_llama.config import TrainConfig
from ember.mlperf_llama.train import Trainer
from ember.tensor import Tensor
trainer = Trainer(TrainConfig(preset="tiny", batch_size=4, seq_len=256, fake_data=True, progress=False))
tokens = np.random.default_rng(0).integers(0, trainer.model_cfg.vocab_size, (4, 257)).astype(np.int32)
trainer.micro_step(Tensor(tokens))[0].item()
trainer.optimizer_step().item()
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--fill", action="store_true", help="fill the folder with a cold first step")
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    if args.fill:
        subprocess.run([sys.executable, "-c", FILL], env={**os.environ, "EMBER_CACHE_DIR": str(args.folder)},
                       check=True)
        return

    from ember.codegen import CRenderer
    from ember.codegen.cache import program_from_json, program_to_json
    from ember.uops import Ops, files

    payloads = []
    for path in sorted((args.folder / "program").iterdir()):
        if (entry := files.read_entry(path, path.name)) is not None:
            payloads.append(entry.payload)
    renderer = CRenderer()
    decode_s, encode_s = [], []
    specs = []
    for _ in range(args.runs):
        t = time.perf_counter()
        specs = [program_from_json(p, renderer) for p in payloads]
        rows = sum(len(s.uops) for s in specs)
        decode_s.append(time.perf_counter() - t)
        t = time.perf_counter()
        out = [program_to_json(s) for s in specs]
        encode_s.append(time.perf_counter() - t)
    enums = ints = 0
    for s in specs:
        for u in s.uops:
            for a in (u.arg if type(u.arg) is tuple else (u.arg,)):
                enums += type(a) is Ops
    for s in (program_from_json(p, renderer) for p in payloads):  # (ints: an Ops arg stored as its number)
        ints += sum(1 for u in s.uops if u.op in (Ops.REDUCE, Ops.WMMA) and type(u.arg) is int)
    print(f"{len(payloads)} programs, {rows} linear rows, payload {sum(map(len, payloads))} bytes "
          f"(re-encoded {sum(map(len, out))}), Ops args {enums}, reduce args read as int {ints}")
    print(f"decode first {decode_s[0] * 1e3:.1f} ms, median {statistics.median(decode_s) * 1e3:.1f} ms "
          f"(min {min(decode_s) * 1e3:.1f}); encode median {statistics.median(encode_s) * 1e3:.1f} ms "
          f"(min {min(encode_s) * 1e3:.1f}) (of {args.runs})")
    import cProfile
    import pstats
    for name, fn in (("decode", lambda: [program_from_json(p, renderer).uops for p in payloads]),
                     ("encode", lambda: [program_to_json(s) for s in specs])):
        prof = cProfile.Profile()
        prof.runcall(fn)
        print(f"{name} function calls: {pstats.Stats(prof).total_calls}")


if __name__ == "__main__":
    main()
