"""Model state: find parameters, state dicts, and the safetensors file format (read and written by us, byte for byte
what the `safetensors` library reads and writes).

safetensors layout: an 8-byte little-endian header length N, N bytes of JSON
`{name: {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {str: str}}`, then the data
(offsets relative to the end of the header, row-major, little-endian).
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ember.runtime import Device
from ember.tensor import engine, realize
from ember.tensor.tensor import Tensor
from ember.uops import DType, Ops, UOp, dtypes, files

SAFETENSORS_DTYPES: dict[str, DType] = {
    "BOOL": dtypes.bool, "U8": dtypes.uint8, "I8": dtypes.int8, "U16": dtypes.uint16, "I16": dtypes.int16,
    "U32": dtypes.uint32, "I32": dtypes.int32, "U64": dtypes.uint64, "I64": dtypes.int64, "F16": dtypes.float16,
    "BF16": dtypes.bfloat16, "F32": dtypes.float32, "F64": dtypes.float64, "F8_E4M3": dtypes.fp8e4m3,
    "F8_E5M2": dtypes.fp8e5m2}
_CODE = {v: k for k, v in SAFETENSORS_DTYPES.items()}


# *** parameters and state dicts ***
def get_state_dict(obj: Any, prefix: str = "") -> dict[str, Tensor]:
    """Every Tensor reachable through attributes, lists, tuples and dicts of `obj`, by dotted path ("l1.weight")."""
    if isinstance(obj, Tensor):
        return {prefix.rstrip("."): obj}
    if isinstance(obj, (list, tuple)):
        items: Any = ((str(i), v) for i, v in enumerate(obj))
    elif isinstance(obj, dict):
        items = obj.items()
    elif hasattr(obj, "__dict__"):
        items = vars(obj).items()
    else:
        return {}
    out: dict[str, Tensor] = {}
    for k, v in items:
        out.update(get_state_dict(v, f"{prefix}{k}."))
    return out


def get_parameters(obj: Any) -> list[Tensor]:
    """The tensors of `obj` (each once), in state-dict order: what an optimizer updates."""
    return list({id(t): t for t in get_state_dict(obj).values()}.values())


def load_state_dict(model: Any, state: Mapping[str, Tensor], strict: bool = True) -> None:
    """Copy `state` into the model's tensors in place. strict: every key must match, both ways."""
    own = get_state_dict(model)
    missing, unexpected = sorted(set(own) - set(state)), sorted(set(state) - set(own))
    if strict and (missing or unexpected):
        raise ValueError(f"load_state_dict: missing keys {missing}, unexpected keys {unexpected}")
    for k, t in own.items():
        if k in state and state[k].shape != t.shape:
            raise ValueError(f"load_state_dict: {k!r} has shape {state[k].shape} in the state, {t.shape} in the model")
    loaded = []  # realized together: one schedule, each copy kernel compiled once for all the tensors of its size
    for k, t in own.items():
        if k not in state:
            continue
        value = state[k].to(t.device).cast(t.dtype).contiguous()
        if realize.is_realized(t.uop):  # in place: an optimizer's flat storage keeps seeing the parameter
            t.assign(value)
        else:  # a lazy parameter (a layer's init) is replaced, never computed
            t.uop = value.uop
        loaded.append(t)
    Tensor.realize_all(*loaded)


# *** safetensors ***
def _raw_bytes(t: Tensor) -> bytes:
    if isinstance(t.device, tuple):  # a tensor on several devices is saved whole: gathered onto the first
        t = t.to(t.device[0])
    view = t.uop if engine.buffer_base(t.uop) is not None else t.contiguous().realize().uop
    return bytes(engine.copyout_bytes(view))


def _tensor_from_bytes(data: memoryview, dtype: DType, shape: tuple[int, ...], device: str | None) -> Tensor:
    dev = Device.canonicalize(device or Device.DEFAULT)
    size = 1
    for s in shape:
        size *= s
    buf = UOp(Ops.BUFFER, dtype, (UOp.unique(), UOp(Ops.DEVICE, arg=dev)), size)
    if size:
        engine.buffer_for(buf).copyin(data)
    return Tensor(buf.reshape(shape))


def safe_save(tensors: Mapping[str, Tensor], path: str | os.PathLike[str],
              metadata: dict[str, str] | None = None) -> None:
    """Write `tensors` to a safetensors file, atomically (a temp file renamed over the target)."""
    header: dict[str, Any] = {}
    blobs, offset = [], 0
    for name, t in tensors.items():
        if not isinstance(name, str) or name == "__metadata__":  # (json would write 1 as "1"; the header's own key)
            raise TypeError(f"safe_save: tensor names must be strings other than '__metadata__', got {name!r}")
        if not isinstance(t, Tensor):
            raise TypeError(f"safe_save: {name!r} is a {type(t).__name__}, not a Tensor")
        if t.dtype not in _CODE:
            raise TypeError(f"safe_save: {name!r} has dtype {t.dtype!r}, which safetensors cannot hold")
        raw = _raw_bytes(t)
        header[name] = {"dtype": _CODE[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)  # the data starts 8-byte aligned, as the reference writer does
    with files.atomic_open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head)
        for b in blobs:
            f.write(b)


def safe_load_metadata(path: str | os.PathLike[str]) -> tuple[dict[str, Any], int]:
    """The parsed, validated header of a safetensors file and the byte offset where its data starts."""
    path = Path(path)
    size = path.stat().st_size
    with open(path, "rb") as f:
        first = f.read(8)
        if len(first) < 8:
            raise ValueError(f"safetensors {path}: file of {size} bytes is too short for a header")
        (n,) = struct.unpack("<Q", first)
        if n > size - 8:
            raise ValueError(f"safetensors {path}: header length {n} runs past the end of the {size}-byte file")
        try:
            header = json.loads(f.read(n))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ValueError(f"safetensors {path}: the header is not valid JSON ({e})") from None
    if not isinstance(header, dict):
        raise ValueError(f"safetensors {path}: the header must be a JSON object")
    data_len, spans = size - 8 - n, []
    for name, info in header.items():
        if name == "__metadata__":
            if not isinstance(info, dict) or not all(isinstance(v, str) for v in info.values()):
                raise ValueError(f"safetensors {path}: __metadata__ must map strings to strings, got {str(info)[:80]}")
            continue
        if not isinstance(info, dict):
            raise ValueError(f"safetensors {path}: tensor {name!r} has the entry {str(info)[:80]}, expected "
                             "{'dtype', 'shape', 'data_offsets'}")
        if info.get("dtype") not in SAFETENSORS_DTYPES:
            raise ValueError(f"safetensors {path}: tensor {name!r} has dtype {info.get('dtype')!r}, expected one of "
                             f"{', '.join(SAFETENSORS_DTYPES)}")
        shape = info.get("shape")
        if not isinstance(shape, list) or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0
                                                  for s in shape):
            raise ValueError(f"safetensors {path}: tensor {name!r} has shape {shape!r}, expected a list of integers "
                             ">= 0")
        offsets = info.get("data_offsets")
        if not isinstance(offsets, list) or len(offsets) != 2 or \
                not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets):
            raise ValueError(f"safetensors {path}: tensor {name!r} has data_offsets {offsets!r}, expected [begin, "
                             "end], two integers")
        begin, end = offsets
        count = 1
        for s in shape:
            count *= s
        if not 0 <= begin <= end <= data_len or end - begin != count * SAFETENSORS_DTYPES[info["dtype"]].itemsize:
            raise ValueError(f"safetensors {path}: {name!r} has data_offsets {info['data_offsets']} that do not fit "
                             f"shape {info['shape']} of {info['dtype']} in {data_len} data bytes")
        spans.append((begin, end, name))
    spans.sort()
    for (_, e0, n0), (b1, _, n1) in zip(spans, spans[1:]):
        if b1 < e0:
            raise ValueError(f"safetensors {path}: the data of {n0!r} and {n1!r} overlap")
    return header, 8 + n


def safe_load(path: str | os.PathLike[str], device: str | None = None) -> dict[str, Tensor]:
    """The tensors of a safetensors file (on `device`, default Device.DEFAULT)."""
    header, start = safe_load_metadata(path)
    data = Path(path).read_bytes()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        out[name] = _tensor_from_bytes(memoryview(data)[start + b:start + e], SAFETENSORS_DTYPES[info["dtype"]],
                                       tuple(info["shape"]), device)
    return out
