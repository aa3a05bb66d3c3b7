"""Optimizers: SGD (momentum, nesterov, weight decay), Adam, AdamW and LAMB. A step assigns every parameter and state in
one schedule; updates are elementwise kernels (one per parameter and state tensor)."""

from __future__ import annotations

from ember.tensor.tensor import Tensor, no_grad


class Optimizer:
    def __init__(self, params: list[Tensor], lr: float):
        if not params:
            raise ValueError("optimizer: got an empty parameter list")
        if lr < 0:
            raise ValueError(f"optimizer: lr must be >= 0, got {lr}")
        for i, p in enumerate(params):
            if not isinstance(p, Tensor):
                raise TypeError(f"optimizer: parameter {i} is a {type(p).__name__}, not a Tensor")
            if p.requires_grad is None:
                p.requires_grad = True
        self.params, self.lr = list(params), lr

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    def _grads(self) -> list[Tensor]:
        missing = [i for i, p in enumerate(self.params) if p.grad is None]
        if missing:
            raise ValueError(f"step: parameters {missing} have no .grad (call backward() first)")
        return [p.grad for p in self.params]  # type: ignore[misc]

    def step(self) -> None:
        with no_grad():
            updated = self._step(self._grads())
        Tensor.realize_all(*updated)

    def _step(self, grads: list[Tensor]) -> list[Tensor]:
        raise NotImplementedError(f"{type(self).__name__}._step is not implemented")


class SGD(Optimizer):
    """SGD with momentum (PyTorch's formulation: buf = momentum*buf + g; nesterov uses g + momentum*buf)."""

    def __init__(self, params: list[Tensor], lr: float = 1e-3, momentum: float = 0.0, weight_decay: float = 0.0,
                 nesterov: bool = False):
        super().__init__(params, lr)
        if nesterov and momentum <= 0:
            raise ValueError("SGD: nesterov needs momentum > 0")
        self.momentum, self.wd, self.nesterov = momentum, weight_decay, nesterov
        self.bufs = [Tensor.zeros(*p.shape, dtype=p.dtype, device=p.device).contiguous().realize()
                     for p in self.params] if momentum else []

    def _step(self, grads: list[Tensor]) -> list[Tensor]:
        out = []
        for i, (p, g) in enumerate(zip(self.params, grads)):
            g = g + p * self.wd if self.wd else g
            if self.momentum:
                buf = self.bufs[i].assign(self.bufs[i] * self.momentum + g)
                g = g + buf * self.momentum if self.nesterov else buf
                out.append(buf)
            out.append(p.assign(p - g * self.lr))
        return out


class AdamW(Optimizer):
    """AdamW (decoupled weight decay, PyTorch's defaults and bias correction); Adam is AdamW with no decay."""

    def __init__(self, params: list[Tensor], lr: float = 1e-3, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8,
                 weight_decay: float = 0.01):
        super().__init__(params, lr)
        if not (0 <= b1 < 1 and 0 <= b2 < 1):
            raise ValueError(f"AdamW: betas must be in [0, 1), got ({b1}, {b2})")
        self.b1, self.b2, self.eps, self.wd, self.t = b1, b2, eps, weight_decay, 0
        self.m = [Tensor.zeros(*p.shape, device=p.device).contiguous().realize() for p in self.params]
        self.v = [Tensor.zeros(*p.shape, device=p.device).contiguous().realize() for p in self.params]

    def _step(self, grads: list[Tensor]) -> list[Tensor]:
        self.t += 1
        c1, c2 = 1 - self.b1**self.t, 1 - self.b2**self.t
        out = []
        for p, g, m, v in zip(self.params, grads, self.m, self.v):
            g = g.float()
            m.assign(m * self.b1 + g * (1 - self.b1))
            v.assign(v * self.b2 + g * g * (1 - self.b2))
            update = (m * (1 / c1)) / ((v * (1 / c2)).sqrt() + self.eps)
            new = p.float() * (1 - self.lr * self.wd) - update * self.lr
            out += [m, v, p.assign(new.cast(p.dtype))]
        return out


def Adam(params: list[Tensor], lr: float = 1e-3, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8) -> AdamW:
    """Adam: AdamW without weight decay."""
    return AdamW(params, lr, b1, b2, eps, weight_decay=0.0)


class LAMB(AdamW):
    """LAMB (You et al. 2019): the AdamW step of each parameter scaled by the trust ratio ||w|| / ||step||
    (1 where either norm is 0); weight decay is part of the step."""

    def _step(self, grads: list[Tensor]) -> list[Tensor]:
        self.t += 1
        c1, c2 = 1 - self.b1**self.t, 1 - self.b2**self.t
        out = []
        for p, g, m, v in zip(self.params, grads, self.m, self.v):
            g = g.float()
            m.assign(m * self.b1 + g * (1 - self.b1))
            v.assign(v * self.b2 + g * g * (1 - self.b2))
            step = (m * (1 / c1)) / ((v * (1 / c2)).sqrt() + self.eps) + p.float() * self.wd
            w_norm, s_norm = (p.float() * p.float()).sum().sqrt(), (step * step).sum().sqrt()
            trust = ((w_norm > 0) & (s_norm > 0)).where(w_norm / s_norm, 1.0)
            out += [m, v, p.assign((p.float() - step * (trust * self.lr)).cast(p.dtype))]
        return out
