"""Optimizers: SGD (momentum, nesterov, weight decay), Adam, AdamW and LAMB, fused.

An optimizer moves its parameters into one flat buffer per group (same device, dtype and weight decay;
`share_storage`), keeps one flat gradient buffer that `backward()` accumulates into in place, and flat states. A step
is then a constant number of elementwise kernels per group (AdamW: m, v, parameter), whatever the number of parameter
tensors. The learning rate and the step count live on the device, so a jitted step replays with the current values:
set `opt.lr = x` between steps (a host write, no kernel)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from ember.tensor import engine
from ember.tensor.realize import share_storage, storage_views
from ember.tensor.tensor import Tensor, no_grad
from ember.uops import DType, dtypes, prod, shard_shape


class ParamGroup:
    """Parameters updated together: one flat parameter buffer, one flat gradient buffer, their views. On several
    devices the flat buffers hold each device's parts; `zero` splits the optimizer state of a replicated group over
    its devices (ZeRO-1), so the flat length is a multiple of the device count."""

    def __init__(self, params: list[Tensor], weight_decay: float, zero: bool = False):
        self.params, self.weight_decay = params, weight_decay
        self.axes = [p.shard_axis if isinstance(p.device, tuple) else None for p in params]
        multi = isinstance(params[0].device, tuple)
        self.ndev = len(params[0].device) if multi else 1
        self.sharded = multi and any(a is not None for a in self.axes)
        self.zero = zero and multi and not self.sharded
        self.flat = share_storage(params, multiple=self.ndev if self.zero else 1)
        self.flat_grad = self.flat.zeros_like().contiguous()  # realized by the optimizer with its other buffers
        self.grad_views: list[Tensor] = []  # views of the realized flat_grad (`bind_grads`)

    def bind_grads(self) -> None:
        self.grad_views = storage_views(self.flat_grad, [p.shape for p in self.params], self.axes)

    @property
    def device(self) -> Any:
        return self.flat.device

    def state_like(self, dtype: DType = dtypes.float32) -> Tensor:
        """A zero state buffer for this group: the flat's layout, or split over the devices under ZeRO. Not realized:
        an optimizer realizes its state in one `Tensor.realize_all` (one schedule, its kernels compiled together)."""
        zeros = self.flat.zeros_like(dtype=dtype)
        return (zeros.shard(self.device, 0) if self.zero else zeros).contiguous()

    # host layouts for checkpoints: a state's whole flat (`.numpy()` of it) <-> one array per parameter
    def _places(self) -> list[tuple[int, int, tuple[int, ...]]]:
        out, offset = [], 0
        for p, a in zip(self.params, self.axes):
            local = shard_shape(p.shape, a, self.ndev)
            k = int(prod(local))
            out.append((offset, k, local))
            offset += k
        return out

    def unflatten(self, flat: np.ndarray) -> list[np.ndarray]:
        """Each parameter's whole value from the host copy of a state flat of this group."""
        if not self.sharded:
            return [flat[o:o + k].reshape(p.shape) for p, (o, k, _) in zip(self.params, self._places())]
        size = flat.size // self.ndev  # a sharded flat is the devices' flats side by side
        return [np.concatenate([flat[i * size + o:i * size + o + k].reshape(local) for i in range(self.ndev)], axis=a)
                for a, (o, k, local) in zip(self.axes, self._places())]

    def flatten(self, values: list[np.ndarray], size: int) -> np.ndarray:
        """The host flat (of `size` elements) of a state of this group from one whole array per parameter."""
        out = np.zeros(size, np.float32 if not values else values[0].dtype)
        per = size // self.ndev if self.sharded else size
        for v, a, (o, k, _) in zip(values, self.axes, self._places()):
            if not self.sharded:
                out[o:o + k] = v.reshape(-1)
                continue
            for i, part in enumerate(np.split(v, self.ndev, axis=a)):
                out[i * per + o:i * per + o + k] = part.reshape(-1)
        return out


class Optimizer:
    """Base: parameter groups in flat storage, device-side lr, gradient bookkeeping. `params` is a list of tensors or
    of dicts {"params": [...], "weight_decay": x} (PyTorch's param groups; only weight_decay may differ)."""

    def __init__(self, params: Iterable[Tensor] | Iterable[Mapping[str, Any]], lr: float, weight_decay: float = 0.0,
                 zero: bool = False):
        specs = _group_specs(list(params), weight_decay)
        _check_float("lr", lr)
        self.params = [p for ps, _ in specs for p in ps]
        if len({id(p) for p in self.params}) != len(self.params):
            raise ValueError("optimizer: a parameter appears twice")
        for p in self.params:
            if p.requires_grad is None:
                p.requires_grad = True
        Tensor.realize_all(*self.params)
        self.groups: list[ParamGroup] = []
        for ps, wd in specs:
            by_kind: dict[tuple[Any, ...], list[Tensor]] = {}
            for p in ps:
                if not dtypes.is_float(p.dtype):
                    raise TypeError(f"optimizer: parameters must be float tensors, got {p.dtype!r}")
                # (a flat buffer on several devices is replicated or sharded: a gradient norm over a mix of them
                # would count the replicated parameters once per device)
                sharded = isinstance(p.device, tuple) and p.shard_axis is not None
                by_kind.setdefault((p.device, p.dtype, sharded), []).append(p)
            self.groups += [ParamGroup(g, wd, zero) for g in by_kind.values() if sum(p.numel() for p in g) > 0]
        devices = sorted({g.device for g in self.groups})
        self._lr = {d: Tensor.full((1,), lr, dtypes.float32, d).contiguous() for d in devices}
        # realized together, as each optimizer's state after this (one realize each was a schedule and a C compile
        # each, one after another: ~0.3 s of a cold AdamW)
        Tensor.realize_all(*[g.flat_grad for g in self.groups], *self._lr.values())
        for g in self.groups:
            g.bind_grads()
        self._lr_value = lr
        self.step_count = 0

    # *** the learning rate, on the device ***
    @property
    def lr(self) -> float:
        return self._lr_value

    @lr.setter
    def lr(self, value: float) -> None:
        _check_float("lr", value)
        self._lr_value = float(value)
        for t in self._lr.values():
            for buf in engine.buffers_of(t.uop):
                buf.copyin(memoryview(bytearray(_f32(value))))

    def zero_grad(self) -> None:
        """Zero the flat gradient buffers (one kernel per group); every parameter's .grad is its view again."""
        Tensor.realize_all(*[g.flat_grad.assign(g.flat_grad.zeros_like()) for g in self.groups])
        for g in self.groups:
            for p, view in zip(g.params, g.grad_views):
                p.grad = view

    def _gather_grads(self) -> None:
        """Land every parameter's gradient in its group's flat buffer (pending in-place accumulations, or a .grad the
        user set to another tensor, which is copied in)."""
        missing = [i for i, p in enumerate(self.params) if p.grad is None]
        if missing:
            raise ValueError(f"step: parameters {missing} have no .grad (call backward() first)")
        pending = []
        for g in self.groups:
            for p, view in zip(g.params, g.grad_views):
                if p.grad is not view:
                    if p.grad.shape != p.shape:  # type: ignore[union-attr]
                        raise ValueError(f"step: a .grad has shape {p.grad.shape}, its parameter {p.shape}")  # type: ignore[union-attr]
                    if p.numel():  # (an empty parameter's view is no storage: nothing to land)
                        pending.append(view.assign(p.grad.cast(view.dtype).to(view.device)))  # type: ignore[union-attr]
                    p.grad = view
                else:
                    pending.append(view)
        Tensor.realize_all(*pending)

    def step(self) -> None:
        self._gather_grads()
        with no_grad():
            updated = self._step()
        Tensor.realize_all(*updated)
        self.step_count += 1

    def _step(self) -> list[Tensor]:
        raise NotImplementedError(f"{type(self).__name__}._step is not implemented")

    def _state(self) -> dict[str, Tensor]:
        """The optimizer's own state tensors by name (not the parameters): what a checkpoint must keep."""
        return {}

    def state_dict(self) -> dict[str, Tensor]:
        """The state to checkpoint: every state tensor, the step count and the learning rate (the parameters are the
        model's). `load_state_dict` restores it exactly, so a resumed run continues bit for bit."""
        return {**self._state(), "step_count": Tensor([self.step_count], dtype=dtypes.int64),
                "lr": Tensor([self._lr_value], dtype=dtypes.float64)}

    def load_state_dict(self, state: Mapping[str, Tensor]) -> None:
        """Copy a `state_dict()` back in place (same parameter groups and shapes)."""
        own = self._state()
        expected = set(own) | {"step_count", "lr"}
        missing, unexpected = sorted(expected - set(state)), sorted(set(state) - expected)
        if missing or unexpected:
            raise ValueError(f"optimizer load_state_dict: missing keys {missing}, unexpected keys {unexpected}")
        for name, t in own.items():
            if state[name].shape != t.shape:
                raise ValueError(f"optimizer load_state_dict: {name!r} has shape {state[name].shape}, the optimizer "
                                 f"has {t.shape}")
        Tensor.realize_all(*[t.assign(state[name].to(t.device).cast(t.dtype).contiguous())
                             for name, t in own.items()])
        self.step_count = int(state["step_count"].item())
        self.lr = float(state["lr"].item())

    def lr_on(self, group: ParamGroup) -> Tensor:
        return self._lr[group.device]

    # *** checkpoints any sharding layout can load ***
    def param_state_dict(self, named: Mapping[str, Tensor]) -> dict[str, np.ndarray]:
        """The state as host arrays by parameter name: `<state>.<name>` for each per-group state (AdamW: `m`, `v`,
        `master`; SGD: `momentum`), whole (gathered), plus `step_count`, `lr` and the shared device scalars. `named`
        names the parameters (a model's named_parameters()). Unlike `state_dict`, whose flat buffers follow the
        layout, this loads into the same parameters sharded any other way (`load_param_state_dict`)."""
        names = {id(t): name for name, t in named.items()}
        out: dict[str, np.ndarray] = {"step_count": np.array([self.step_count], np.int64),
                                      "lr": np.array([self._lr_value], np.float64)}
        for key, t in self._state().items():
            kind, _, index = key.partition(".")
            if not index.isdigit():  # a per-device scalar state: every device holds the same value
                out.setdefault(kind, t.numpy())
                continue
            g = self.groups[int(index)]
            for p, value in zip(g.params, g.unflatten(t.numpy())):
                out[f"{kind}.{names[id(p)]}"] = value
        return out

    def load_param_state_dict(self, named: Mapping[str, Tensor], state: Mapping[str, np.ndarray]) -> None:
        """Restore a `param_state_dict` in place, whatever layout saved it."""
        names = {id(t): name for name, t in named.items()}
        updates = []
        for key, t in self._state().items():
            kind, _, index = key.partition(".")
            if not index.isdigit():
                if kind not in state:
                    raise ValueError(f"optimizer load_param_state_dict: missing {kind!r}")
                updates.append(t.assign(Tensor(np.asarray(state[kind], np.float32)).to(t.device).contiguous()))
                continue
            g = self.groups[int(index)]
            wanted = [f"{kind}.{names[id(p)]}" for p in g.params]
            if missing := [w for w in wanted if w not in state]:
                raise ValueError(f"optimizer load_param_state_dict: missing {missing[:3]}")
            for w, p in zip(wanted, g.params):
                if tuple(state[w].shape) != p.shape:
                    raise ValueError(f"optimizer load_param_state_dict: {w!r} has shape {tuple(state[w].shape)}, "
                                     f"the parameter {p.shape}")
            flat = g.flatten([np.asarray(state[w], np.float32) for w in wanted], t.numel())
            updates.append(t.assign(Tensor(flat).shard_like(t).cast(t.dtype).contiguous()))
        Tensor.realize_all(*updates)
        self.step_count = int(np.asarray(state["step_count"]).reshape(-1)[0])
        self.lr = float(np.asarray(state["lr"]).reshape(-1)[0])


def _group_specs(params: list[Any], weight_decay: float) -> list[tuple[list[Tensor], float]]:
    if not params:
        raise ValueError("optimizer: got an empty parameter list")
    if all(isinstance(p, Mapping) for p in params):
        specs = []
        for i, spec in enumerate(params):
            if unknown := sorted(set(spec) - {"params", "weight_decay"}):
                raise ValueError(f"optimizer: param group {i} has unsupported keys {unknown} "
                                 "(accepted: 'params', 'weight_decay')")
            wd = spec.get("weight_decay", weight_decay)
            _check_float("weight_decay", wd)
            specs.append((_tensors(list(spec["params"]), f"param group {i}"), float(wd)))
        return specs
    _check_float("weight_decay", weight_decay)
    return [(_tensors(params, "parameter"), float(weight_decay))]


def _tensors(params: list[Any], what: str) -> list[Tensor]:
    for i, p in enumerate(params):
        if not isinstance(p, Tensor):
            raise TypeError(f"optimizer: {what} {i} is a {type(p).__name__}, not a Tensor")
    return params


def _check_float(name: str, value: Any) -> None:
    if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"optimizer: {name} must be a finite number >= 0, got {value!r}")


def _f32(value: float) -> bytes:
    import struct
    return struct.pack("<f", value)


class SGD(Optimizer):
    """SGD with momentum (PyTorch's formulation: buf = momentum*buf + g; nesterov uses g + momentum*buf)."""

    def __init__(self, params: Any, lr: float = 1e-3, momentum: float = 0.0, weight_decay: float = 0.0,
                 nesterov: bool = False):
        super().__init__(params, lr, weight_decay)
        if nesterov and momentum <= 0:
            raise ValueError("SGD: nesterov needs momentum > 0")
        self.momentum, self.nesterov = momentum, nesterov
        self.bufs = [g.state_like(g.flat.dtype) for g in self.groups] if momentum else []
        Tensor.realize_all(*self.bufs)

    def _state(self) -> dict[str, Tensor]:
        return {f"momentum.{i}": b for i, b in enumerate(self.bufs)}

    def _step(self) -> list[Tensor]:
        out = []
        for i, g in enumerate(self.groups):
            p, grad = g.flat, g.flat_grad
            grad = grad + p * g.weight_decay if g.weight_decay else grad
            if self.momentum:
                buf = self.bufs[i].assign(self.bufs[i] * self.momentum + grad)  # PyTorch's first step: buf = g
                grad = grad + buf * self.momentum if self.nesterov else buf
                out.append(buf)
            out.append(p.assign(p - grad * self.lr_on(g).cast(p.dtype)))
        return out


class AdamW(Optimizer):
    """AdamW (decoupled weight decay, PyTorch's defaults and bias correction); Adam is AdamW with no decay.

    clip_norm: clip the gradients to this global L2 norm first (Megatron's rule: scale by 1/(norm+1e-6) when that is
    < 1); the norm of the last step is `grad_norm` (a device tensor). master_weights: keep float32 copies of non-float32
    parameters and update those (the parameters get the rounded result). zero: on several devices, split the moments
    and master weights of replicated parameters over the devices (ZeRO-1): each device updates its slice, and the new
    parameters are gathered back to every device."""

    def __init__(self, params: Any, lr: float = 1e-3, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8,
                 weight_decay: float = 0.01, clip_norm: float | None = None, master_weights: bool = False,
                 zero: bool = False, betas: tuple[float, float] | None = None):
        super().__init__(params, lr, weight_decay, zero)
        if betas is not None:  # (torch's keyword for b1, b2)
            b1, b2 = betas
        if not (0 <= b1 < 1 and 0 <= b2 < 1):
            raise ValueError(f"AdamW: betas must be in [0, 1), got ({b1}, {b2})")
        if clip_norm is not None and not clip_norm > 0:
            raise ValueError(f"AdamW: clip_norm must be > 0 or None, got {clip_norm}")
        self.b1, self.b2, self.eps, self.clip_norm = b1, b2, eps, clip_norm
        self.l2 = 0.0  # Adam's weight_decay: added to the gradient (L2), not decoupled
        self.m = [g.state_like() for g in self.groups]
        self.v = [g.state_like() for g in self.groups]
        self.master = [(g.flat.float().shard(g.device, 0) if g.zero else g.flat.float()).contiguous()
                       if master_weights and g.flat.dtype != dtypes.float32 else None for g in self.groups]
        # b1^t and b2^t, on each device: the bias corrections advance inside the step's kernels
        self.betas_pow = {d: Tensor([1.0, 1.0], device=d).contiguous() for d in self._lr}
        Tensor.realize_all(*self._state().values())
        self.grad_norm: Tensor | None = None

    def _state(self) -> dict[str, Tensor]:
        out = {f"betas_pow.{d}": t for d, t in self.betas_pow.items()}
        for i in range(len(self.groups)):
            out |= {f"m.{i}": self.m[i], f"v.{i}": self.v[i]}
            if (master := self.master[i]) is not None:
                out[f"master.{i}"] = master
        return out

    def _clip_scale(self) -> dict[str, Tensor] | None:
        if self.clip_norm is None:
            return None
        # float32 over millions of elements: the scheduler splits such a reduce into block sums (accurate, parallel)
        sq = [(g.flat_grad.float() * g.flat_grad.float()).sum() for g in self.groups]
        first = self.groups[0].device
        total = sq[0]
        for s in sq[1:]:
            total = total + s.to(first)
        self.grad_norm = total.sqrt()
        scale = (self.clip_norm / (self.grad_norm + 1e-6)).minimum(1.0)
        return {d: scale.to(d) for d in self._lr}

    def _moments(self, i: int, g: ParamGroup, scale: dict[str, Tensor] | None) -> tuple[Tensor, Tensor]:
        grad = g.flat_grad.float()
        if scale is not None:
            grad = grad * scale[g.device]
        if self.l2:
            grad = grad + (self.master[i] if self.master[i] is not None else g.flat.float()) * self.l2
        m, v = self.m[i], self.v[i]
        m.assign(m * self.b1 + grad * (1 - self.b1))
        v.assign(v * self.b2 + grad * grad * (1 - self.b2))
        return m, v

    def _advance_betas(self) -> list[Tensor]:
        return [bp.assign(bp * Tensor([self.b1, self.b2], device=d)) for d, bp in self.betas_pow.items()]

    def _adam_steps(self) -> tuple[list[tuple[int, ParamGroup, Tensor, Tensor, Tensor]], list[Tensor]]:
        """Per group (i, group, m, v, the bias-corrected Adam direction m^ / (sqrt(v^) + eps)), and the tensors every
        step realizes besides the updates (the advanced beta powers, the gradient norm)."""
        scale = self._clip_scale()
        extra = self._advance_betas() + ([self.grad_norm] if self.grad_norm is not None else [])
        steps = []
        for i, g in enumerate(self.groups):
            m, v = self._moments(i, g, scale)
            bp = self.betas_pow[g.device]
            steps.append((i, g, m, v, (m / (1 - bp[0])) / ((v / (1 - bp[1])).sqrt() + self.eps)))
        return steps, extra

    def _step(self) -> list[Tensor]:
        steps, extra = self._adam_steps()
        out: list[Tensor] = []
        for i, g, m, v, update in steps:
            lr = self.lr_on(g)
            w = self.master[i] if self.master[i] is not None else g.flat.float()
            new = w * (1 - lr * g.weight_decay) - update * lr
            if self.master[i] is not None:
                out.append(self.master[i].assign(new))  # type: ignore[union-attr]
            out += [m, v, g.flat.assign(new.cast(g.flat.dtype))]
        return out + extra


def Adam(params: Any, lr: float = 1e-3, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8,
         weight_decay: float = 0.0, betas: tuple[float, float] | None = None, **kwargs: Any) -> AdamW:
    """Adam: AdamW without decoupled weight decay; `weight_decay` is torch.optim.Adam's, added to the gradient (L2)."""
    _check_float("weight_decay", weight_decay)
    opt = AdamW(params, lr, b1, b2, eps, weight_decay=0.0, betas=betas, **kwargs)
    opt.l2 = weight_decay
    return opt


class LAMB(AdamW):
    """LAMB (You et al. 2019): the AdamW step of each parameter scaled by the trust ratio ||w|| / ||step||
    (1 where either norm is 0); weight decay is part of the step. The trust ratio needs two norms per parameter
    tensor, so a LAMB step runs those reductions per parameter; the updates stay fused per group."""

    def _step(self) -> list[Tensor]:
        steps, extra = self._adam_steps()
        out: list[Tensor] = []
        for _, g, m, v, update in steps:
            w = g.flat.float()
            step = (update + w * g.weight_decay).shard_like(g.flat)  # (split under ZeRO: gathered, as AdamW's is)
            # one trust ratio per parameter tensor, broadcast over its slice of the flat buffer: a column block of the
            # flat seen as (rows, length), one row per device whose flat holds a part of every parameter (sharded)
            rows = g.ndev if g.sharded else 1
            w2, s2 = w.reshape(rows, -1), step.reshape(rows, -1)
            ratios, offset = [], 0
            for p in g.params:
                n = p.numel() // rows
                ws, ss = w2[:, offset:offset + n], s2[:, offset:offset + n]
                w_norm, s_norm = (ws * ws).sum().sqrt(), (ss * ss).sum().sqrt()
                trust = ((w_norm > 0) & (s_norm > 0)).where(w_norm / s_norm, 1.0)
                ratios.append(trust.reshape(1, 1).expand(rows, n))
                offset += n
            trust_flat = Tensor.cat(*ratios, dim=1) if len(ratios) > 1 else ratios[0]
            trust_flat = trust_flat.pad(((0, 0), (0, w2.shape[1] - offset))).reshape(-1)  # (a ZeRO flat's tail: unused)
            out += [m, v, g.flat.assign((w - step * trust_flat * self.lr_on(g)).cast(g.flat.dtype))]
        return out + extra
