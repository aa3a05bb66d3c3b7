"""`ember-llama`: train | eval | preprocess | tokenizer-train.

    ember-llama train                          # the embedded default: stdlib corpus, own tokenizer, tiny Llama
    BS=16 GRADIENT_ACC_STEPS=2 ember-llama train --preset 8B --data-dir /raid/c4 --tokenizer tokenizer.model
    ember-llama preprocess c4-train.json.gz --output data/c4 --tokenizer tokenizer.model --validation-fraction 0.01
    ember-llama tokenizer-train corpus/ --vocab-size 4096 --output tokenizer.model
    mpirun -np 2 ember-llama train --dp 2       # data parallel over 2 MPI ranks (see the README)

Every error is caught at the top: one line on stderr saying what went wrong and what to do, exit code 2 for a bad
input (arguments, config, files) and 1 for a failure while running; the traceback only with `--debug` (anywhere on
the command line) or DEBUG>=1.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from ember.mlperf_llama.config import add_cli_arguments, config_from_args
from ember.mlperf_llama.distributed import World
from ember.mlperf_llama.run_config import eval_config, train_config

TRAIN_PRECEDENCE = ("Values come from, lowest to highest precedence: the defaults, the --config file, the MLPerf env "
                    "vars (BS, GRADIENT_ACC_STEPS, SEQLEN, LR, ...), then the flags. Without --seed/SEED each run "
                    "draws a fresh random seed (logged).")
DEFAULT_VALIDATION_FRACTION = 0.05  # preprocess: every 20th document is validation, as in the embedded dataset


def _train(args: argparse.Namespace) -> int:
    from ember.mlperf_llama.model import parameter_count
    from ember.mlperf_llama.train import model_config, train

    world = World.from_environment()
    with world.abort_on_error("ember-llama train"):
        cfg = train_config(args, env=os.environ)  # a fresh seed unless given (all ranks: rank 0's, below)
        cfg = dataclasses.replace(cfg, seed=world.broadcast(cfg.seed)) if world.size > 1 else cfg
        if world.is_root:
            parallel = f", dp {cfg.dp} over {world.size} MPI rank(s)" if cfg.dp > 1 or world.size > 1 else ""
            print(f"ember-llama: preset {cfg.preset}, {parameter_count(model_config(cfg)):,} parameters, global "
                  f"batch {cfg.global_batch_size} x {cfg.seq_len} tokens, up to {cfg.train_samples} samples"
                  f"{parallel}", file=sys.stderr)
        result = train(cfg, world)
    summary = {"status": result.status, "steps": result.steps, "samples": result.samples,
               "final_train_loss": result.losses[-1] if result.losses else None,
               "evals": result.evals, "tokens_per_s": round(result.tokens_per_s, 1)}
    if world.is_root:
        print(json.dumps(summary))
    return 0


def _eval(args: argparse.Namespace) -> int:
    from ember.mlperf_llama.train import evaluate

    world = World.from_environment()
    if not args.checkpoint and args.checkpoint_dir:  # train's name for the folder: evaluating the fresh model instead
        args.checkpoint = args.checkpoint_dir      # of the checkpoint asked for was a silent wrong answer
    with world.abort_on_error("ember-llama eval"):
        cfg = eval_config(args, env=os.environ)  # with --checkpoint: the checkpoint's own config
        loss = evaluate(cfg, args.checkpoint, world)
    if world.is_root:
        print(json.dumps({"eval_samples": cfg.eval_samples, "log_perplexity": loss}))
    return 0


def _preprocess(args: argparse.Namespace) -> int:
    from ember.mlperf_llama.preprocess import preprocess
    from ember.mlperf_llama.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(args.tokenizer)
    fraction = args.validation_fraction
    if fraction is None:  # the default split, unless the first N documents are asked for
        fraction = 0.0 if args.validation_documents is not None else DEFAULT_VALIDATION_FRACTION
    result = preprocess(args.inputs, args.output, tokenizer, validation_fraction=fraction,
                        validation_documents=args.validation_documents, text_key=args.text_key,
                        progress=not args.no_progress)
    print(json.dumps({k: str(v) if isinstance(v, Path) else v for k, v in vars(result).items()}))
    if result.validation_prefix is not None:
        print(f"ember-llama preprocess: train on it with: ember-llama train --data-dir {result.train_prefix.parent} "
              f"--train-prefix {result.train_prefix.name} --valid-prefix {result.validation_prefix.name} "
              f"--tokenizer {args.tokenizer}", file=sys.stderr)
    return 0


def _submission(args: argparse.Namespace) -> int:
    from ember.mlperf_llama.launch import launch_submission

    overrides = json.loads(Path(args.system_json).read_text()) if args.system_json else None
    cfg = config_from_args(args, env=os.environ)
    result = launch_submission(cfg, args.output, args.system, runs=args.runs, division=args.division,
                               status=args.status, system_overrides=overrides, in_process=args.in_process)
    print(json.dumps({"root": str(result.root), "results": [str(p) for p in result.result_files],
                      "seeds": result.seeds, "statuses": result.statuses}))
    return 0


def _tokenizer_train(args: argparse.Namespace) -> int:
    from ember.mlperf_llama.preprocess import iter_documents
    from ember.mlperf_llama.tokenizer import train_llama3_tokenizer

    tok = train_llama3_tokenizer(iter_documents(args.inputs, text_key=args.text_key), args.vocab_size)
    tok.save(args.output)
    print(json.dumps({"output": str(args.output), "ranks": tok.num_base_tokens, "vocab_size": tok.vocab_size}))
    return 0


class _Parser(argparse.ArgumentParser):
    """argparse, with a bad command line reported in one line too (exit code 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    """The `ember-llama` argument parser and its subcommands."""
    parser = _Parser(prog="ember-llama", description="The MLPerf Llama 3.1 trainer on Ember. Pass "
                                     "--debug (anywhere) for the traceback of an error.")
    parser.add_argument("--debug", action="store_true",
                        help="print the traceback of an error (also DEBUG>=1); accepted anywhere on the line")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("train", help="train (no arguments: the embedded default run)",
                       description=TRAIN_PRECEDENCE)
    add_cli_arguments(p)
    p.set_defaults(run=_train)
    p = sub.add_parser("eval", help="evaluate a checkpoint's validation log-perplexity")
    add_cli_arguments(p)
    p.add_argument("--checkpoint", default=None, help="checkpoint directory (with a 'latest' file; --checkpoint-dir "
                   "too); none: the freshly initialized model")
    p.set_defaults(run=_eval)
    p = sub.add_parser("preprocess", help="tokenize text/jsonl(.gz) into a Megatron indexed dataset")
    p.add_argument("inputs", nargs="+", help="files or directories (.jsonl/.json(.gz) with a text field, or text)")
    p.add_argument("--output", required=True, help="output prefix: writes <prefix>_train_text_document.{bin,idx} "
                   "and <prefix>_validation_text_document.{bin,idx}")
    p.add_argument("--tokenizer", required=True, help="tiktoken ranks file or sentencepiece model")
    p.add_argument("--validation-fraction", type=float, default=None,
                   help=f"share of documents for validation, every k-th one (default: {DEFAULT_VALIDATION_FRACTION}; "
                   "0 = no validation split)")
    p.add_argument("--validation-documents", type=int, default=None, help="or: the first N documents")
    p.add_argument("--text-key", default="text", help="jsonl field holding the text")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(run=_preprocess)
    p = sub.add_parser("tokenizer-train", help="train a BPE tokenizer (tiktoken format, Llama 3 specials)")
    p.add_argument("inputs", nargs="+", help="files or directories of text/jsonl")
    p.add_argument("--vocab-size", type=int, required=True, help="total vocabulary incl. 256 special tokens")
    p.add_argument("--output", required=True, help="the ranks file to write")
    p.add_argument("--text-key", default="text", help="jsonl field holding the text")
    p.set_defaults(run=_tokenizer_train)
    p = sub.add_parser("submission", help="the benchmark's runs in the MLPerf submission folder layout",
                       description="An init-only run, then --runs training runs, each with its own random seed, "
                       "writing <output>/results/<system>/llama31_8b/result_<i>.txt, <output>/systems/<system>.json "
                       "and the config under <output>/benchmarks/. " + TRAIN_PRECEDENCE)
    add_cli_arguments(p)
    p.add_argument("--output", required=True, help="the submitter folder to write")
    p.add_argument("--system", required=True, help="the system name (folder and JSON file name)")
    p.add_argument("--runs", type=int, default=None, help="runs to make (default: what the package checker wants, 10)")
    p.add_argument("--division", default="closed", choices=("closed", "open"), help="MLPerf division")
    p.add_argument("--status", default="Research, Development, or Internal (RDI)", help="system availability")
    p.add_argument("--system-json", default=None, help="JSON file of system description fields to fill in")
    p.add_argument("--in-process", action="store_true", help="run each run in this process, not its own (small "
                   "presets, tests)")
    p.set_defaults(run=_submission)
    return parser


_HINTS: tuple[tuple[type[BaseException], str], ...] = (
    (FileNotFoundError, "check the path"),
    (PermissionError, "check the permissions of the file or folder"),
    (IsADirectoryError, "give a file, not a folder"),
    (NotADirectoryError, "give a folder, not a file"),
    (MemoryError, "lower SEQLEN or BS"),
    (ImportError, "install the missing package (see the README)"),
    (OSError, "check the disk and the paths given"),
)
_INPUT_ERRORS = (ValueError, TypeError, OSError, ImportError)  # a bad argument, config value or file: exit code 2


def _debug_requested(argv: list[str]) -> bool:
    raw = os.environ.get("DEBUG", "").strip()
    return "--debug" in argv or (raw.isdigit() and int(raw) >= 1)


def describe_error(command: str, e: BaseException, debug: bool = False) -> str:
    """The one line the CLI prints for an error: what went wrong (the message's first line) and what to do."""
    lines = str(e).strip().splitlines()
    what = lines[0] if lines else type(e).__name__
    if not isinstance(e, ValueError | TypeError | FloatingPointError) or what == type(e).__name__:
        what = f"{type(e).__name__}: {what}" if lines else what
    hint = next((h for kind, h in _HINTS if isinstance(e, kind)), None)
    todo = [*([hint] if hint else []), *([] if debug else ["rerun with --debug for the traceback"])]
    return f"ember-llama {command}: error: {what}" + (f" ({'; '.join(todo)})" if todo else "")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI on `argv` (default: sys.argv[1:]); returns the exit code."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    debug = _debug_requested(args_list)
    args = build_parser().parse_args([a for a in args_list if a != "--debug"])
    try:
        return int(args.run(args))
    except KeyboardInterrupt:
        print(f"ember-llama {args.command}: interrupted", file=sys.stderr)
        return 130
    except SystemExit:
        raise
    except BaseException as e:  # noqa: BLE001 - the top level: every error becomes one line and an exit code
        if debug:
            traceback.print_exc(file=sys.stderr)
        print(describe_error(args.command, e, debug), file=sys.stderr)
        return 2 if isinstance(e, _INPUT_ERRORS) else 1


if __name__ == "__main__":
    sys.exit(main())
