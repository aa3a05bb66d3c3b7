"""Movement ops on Tensor: views that change shape, order or extent (reshape, permute, expand, pad, shrink, flip and
the forms built on them: squeeze, flatten, repeat, cat, stack, split, tril, roll, diagonal, unfold, meshgrid...)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ember.tensor.ops.args import (
    ArgumentError,
    AxisError,
    ModeError,
    ShapeError,
    normalize_axis,
    shape_args,
    torch_axis_name,
)
from ember.uops import DType, Ops, dtypes, least_upper_dtype, prod

if TYPE_CHECKING:  # at run time ember.tensor.tensor binds Tensor here: it is the class built on this mixin
    from ember.tensor.tensor import Tensor


class MovementMixin:
    """Views of a tensor: `x.reshape(2, -1)`, `x.permute(1, 0)`, `x.pad(((1, 1), (0, 2)))`, `a.cat(b, dim=1)`."""

    __slots__ = ()

    def reshape(self, *shape: Any) -> Tensor:
        """The same elements in `shape` (row-major): one dim may be -1 (inferred), and None keeps that dim of self:
        `x.reshape(None, -1)` keeps dim 0 and flattens the rest."""
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        new = [self.shape[i] if s is None and i < self.ndim else s for i, s in enumerate(shape)]
        if any(s is None for s in new):
            raise ValueError(f"reshape: None keeps a dim of self, which has only {self.ndim} dims: {tuple(shape)}")
        new = list(shape_args(new))
        if new.count(-1) > 1:
            raise ShapeError(f"reshape: only one dim can be -1, got {tuple(new)}")
        if any(s < -1 for s in new):
            raise ValueError(f"reshape: invalid shape dimension {min(new)} in {tuple(new)}")
        if -1 in new:
            known = int(prod([s for s in new if s != -1]))
            if known == 0 or self.numel() % known:
                raise ShapeError(f"reshape: cannot view shape {self.shape} as {tuple(new)}: shape is invalid for input "
                                 f"of size {self.numel()}")
            new[new.index(-1)] = self.numel() // known
        if int(prod(new)) != self.numel():
            raise ShapeError(f"reshape: cannot view shape {self.shape} as {tuple(new)}: shape is invalid for input of "
                             f"size {self.numel()}")
        return Tensor(self.uop.reshape(tuple(new)))

    def permute(self, *order: Any) -> Tensor:
        """The dims in `order` (a permutation of 0..ndim-1; negative dims count from the end)."""
        order_t = shape_args(order)
        if len(order_t) != self.ndim:
            raise ArgumentError(f"permute: order {order_t} must name each of the {self.ndim} dims once (number of dims "
                                "don't match)")
        if any(not -max(self.ndim, 1) <= a < max(self.ndim, 1) for a in order_t):
            raise AxisError(f"permute: order {order_t} is out of range for a tensor of {self.ndim} dims")
        order_t = tuple(a % self.ndim for a in order_t) if self.ndim else order_t
        if len(set(order_t)) != len(order_t):
            raise ArgumentError(f"permute: order {order_t} repeats a dim")
        return Tensor(self.uop.permute(order_t))

    def transpose(self, a: int = 1, b: int = 0) -> Tensor:
        """Swap dims a and b."""
        order = list(range(self.ndim))
        a, b = normalize_axis(a, self.ndim, "transpose")[0], normalize_axis(b, self.ndim, "transpose")[0]
        if a == b:
            return self
        order[a], order[b] = order[b], order[a]
        return self.permute(order)

    @property
    def T(self) -> Tensor:
        return self.permute(tuple(reversed(range(self.ndim))))

    def expand(self, *shape: Any) -> Tensor:
        new = shape_args(shape)
        if len(new) < self.ndim:
            raise ShapeError(f"expand: cannot expand {self.shape} to fewer dims {new}")
        x = self.reshape((1,) * (len(new) - self.ndim) + self.shape) if len(new) > self.ndim else self
        return Tensor(x.uop.expand(tuple(s if n == -1 else n for s, n in zip(x.shape, new))))

    def pad(self, padding: Sequence[Any], value: float | str = 0.0, mode: str | float = "constant") -> Tensor:
        """Pad each dim by (before, after): `padding` is one pair (or None) per dim from the first, or torch's flat
        form (left, right, top, bottom, ...) from the last dim. Negative amounts cut. `mode`: "constant" (with
        `value`, in the tensor's dtype), "reflect" (mirror, edge not repeated), "replicate" (repeat the edge) or
        "circular" (wrap around). tinygrad's and torch's order `x.pad(padding, "reflect")` works too."""
        if isinstance(value, str):  # pad(padding, mode[, value])
            value, mode = (0.0 if isinstance(mode, str) else mode), value
        if not isinstance(mode, str):
            raise TypeError(f"pad: mode must be a str, got {mode!r}")
        if mode not in ("constant", "reflect", "replicate", "circular"):
            raise ModeError(f"pad: mode must be 'constant', 'reflect', 'replicate' or 'circular', got {mode!r}")
        padding = tuple(padding)
        if all(isinstance(p, int) for p in padding):
            if len(padding) % 2 or len(padding) // 2 > self.ndim:
                raise ArgumentError(f"pad: flat padding {padding} needs an even length of at most 2 * {self.ndim}")
            pairs = [(padding[2 * i], padding[2 * i + 1]) for i in range(len(padding) // 2)]
            padding = tuple([(0, 0)] * (self.ndim - len(pairs)) + pairs[::-1])
        if len(padding) != self.ndim:
            raise ArgumentError(f"pad: padding {padding} must have one (before, after) pair per dim ({self.ndim})")
        pairs_t = tuple((0, 0) if p is None else (int(p[0]), int(p[1])) for p in padding)
        if any(s + b + a < 0 for (b, a), s in zip(pairs_t, self.shape)):
            raise ShapeError(f"pad: padding {pairs_t} of shape {self.shape} leaves a negative size")
        if mode in ("reflect", "replicate"):  # (index-based: a negative amount may reach past the other side's)
            return self._pad_mode(pairs_t, mode)
        # negative amounts shrink first, the rest pads (circular too, as torch)
        x = self.shrink([(max(0, -b), s - max(0, -a)) for (b, a), s in zip(pairs_t, self.shape)])
        pos = tuple((max(0, b), max(0, a)) for b, a in pairs_t)
        if mode == "circular":
            return x._pad_circular(pos)
        out = Tensor(x.uop.pad(pos))
        if value == 0:
            return out
        mask = Tensor(Tensor.full(x.shape, True, dtypes.bool, x.device).uop.pad(pos))
        return mask.where(out, Tensor(value, x.device, x.dtype))  # the fill in the tensor's dtype, as torch

    def _pad_circular(self, pairs: tuple[tuple[int, int], ...]) -> Tensor:
        # out[i] = x[(i - before) mod n] along each dim: a window of the dim repeated enough times
        x = self
        for d, (before, after) in enumerate(pairs):
            n, total = x.shape[d], x.shape[d] + before + after
            if not before and not after:
                continue
            if n == 0:
                raise ValueError(f"pad: circular padding needs a non-empty dim {d}")
            if before > n or after > n:
                raise ArgumentError(f"pad: circular padding {(before, after)} of dim {d} (size {n}) would wrap around "
                                    "more than once")
            start = (-before) % n
            copies = -(-(start + total) // n)
            reps = [copies if i == d else 1 for i in range(x.ndim)]
            x = x.repeat(reps).shrink([(start, start + total) if i == d else None for i in range(x.ndim)])
        return x

    def _pad_mode(self, padding: tuple[tuple[int, int], ...], mode: str) -> Tensor:
        # out[i] = x[j] along each dim, j = i - before mirrored (reflect) or clamped (replicate) into [0, n)
        x = self
        for d, (before, after) in enumerate(padding):
            n = x.shape[d]
            if not before and not after:
                continue
            if mode == "reflect" and (before >= n or after >= n):
                raise ArgumentError(f"pad: reflect padding {(before, after)} of dim {d} must be smaller than its "
                                    f"size {n}")
            if n == 0:
                raise ValueError(f"pad: {mode} padding needs a non-empty dim {d}")
            index = []
            for i in range(n + before + after):
                j = i - before
                if mode == "reflect":
                    j = -j if j < 0 else 2 * (n - 1) - j if j >= n else j
                index.append(min(max(j, 0), n - 1))
            x = x._take(d, index)
        return x

    def _take(self, d: int, index: list[int]) -> Tensor:
        # self's entries at the host-known `index` along dim d, as views: each run of indices that step by +1, -1 or 0
        # is a slice (an expand for 0), the runs joined by cat
        runs: list[list[int]] = []  # [start, step, length]
        for j in index:
            if runs and runs[-1][2] == 1 and abs(j - runs[-1][0]) <= 1:
                runs[-1][1], runs[-1][2] = j - runs[-1][0], 2
            elif runs and runs[-1][0] + runs[-1][1] * runs[-1][2] == j and runs[-1][2] > 1:
                runs[-1][2] += 1
            else:
                runs.append([j, 1, 1])
        parts = []
        for start, step, length in runs:
            idx: list[Any] = [slice(None)] * self.ndim
            if step == 0:
                idx[d] = slice(start, start + 1)
                part = self[tuple(idx)]
                parts.append(part.expand([length if i == d else s for i, s in enumerate(part.shape)]))
                continue
            stop = start + step * length
            idx[d] = slice(start, stop if stop >= 0 else None, step)
            parts.append(self[tuple(idx)])
        if not parts:
            return self.shrink([(0, 0) if i == d else None for i in range(self.ndim)])
        return parts[0].cat(*parts[1:], dim=d) if len(parts) > 1 else parts[0]

    def diagonal(self, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
        """The diagonal of dims dim1 and dim2 (above it for offset > 0, below for < 0) as a new last dim, the other dims
        kept in order (as torch): a view made of pads and reshapes, with a gradient."""
        if self.ndim < 2:
            raise RuntimeError(f"diagonal: needs at least 2 dims, got shape {self.shape}")
        a, b = normalize_axis(dim1, self.ndim, "diagonal")[0], normalize_axis(dim2, self.ndim, "diagonal")[0]
        if a == b:
            raise RuntimeError(f"diagonal: dimensions cannot be identical {dim1}, {dim2}")
        x = self.permute([i for i in range(self.ndim) if i not in (a, b)] + [a, b])
        rows, cols = x.shape[-2:]
        length = max(0, min(rows, cols - offset) if offset >= 0 else min(rows + offset, cols))
        r0, c0 = (0, offset) if offset >= 0 else (-offset, 0)
        lead = x.shape[:-2]
        if length == 0:
            return x.shrink([None] * len(lead) + [(0, 0), (0, 0)]).reshape(*lead, 0)
        x = x.shrink([None] * len(lead) + [(r0, r0 + length), (c0, c0 + length)]).reshape(*lead, length * length)
        # the diagonal of an L x L block is every (L + 1)-th element: pad to L * (L + 1) and read column 0
        x = x.pad([None] * len(lead) + [(0, length)]).reshape(*lead, length, length + 1)
        return x.shrink([None] * len(lead) + [None, (0, 1)]).reshape(*lead, length)

    def diag(self, diagonal: int = 0) -> Tensor:
        """A 1-d tensor as the diagonal of a square matrix (above the main one for diagonal > 0, below for < 0); of a
        2-d tensor, its diagonal (as torch.diag)."""
        if self.ndim == 2:
            return self.diagonal(diagonal)
        if self.ndim != 1:
            raise RuntimeError(f"diag: expected a 1-d or 2-d tensor, got shape {self.shape}")
        n = self.shape[0]
        # the inverse of diagonal's reshapes: each element followed by n zeros, cut to n x n
        x = self.reshape(n, 1).pad(((0, 0), (0, n))).reshape(n * (n + 1))
        x = x.shrink(((0, n * n),)).reshape(n, n)
        k = abs(diagonal)
        return x.pad(((0, k), (k, 0)) if diagonal >= 0 else ((k, 0), (0, k)))

    def unfold(self, dimension: int, size: int, step: int) -> Tensor:
        """Every window of `size` elements along `dimension`, `step` apart, as a new last dim (torch.Tensor.unfold):
        shape (..., n_windows, ..., size), n_windows = (n - size) // step + 1."""
        d = normalize_axis(dimension, max(self.ndim, 1), "unfold")[0]
        x = self.reshape(1) if self.ndim == 0 else self
        n = x.shape[d]
        if not isinstance(size, int) or size < 0 or size > n:
            raise RuntimeError(f"unfold: maximum size for tensor at dimension {d} is {n} but size is {size}")
        if not isinstance(step, int) or step <= 0:
            raise RuntimeError(f"unfold: step is {step} but must be > 0")
        x = x.transpose(d, -1)
        lead, full = x.shape[:-1], n - size + 1
        if size == 0:  # (empty windows, still made from x: its gradient is zeros, not missing)
            windows = x.shrink([None] * len(lead) + [(0, 0)]).unsqueeze(-1).expand(*lead, 0, full)
        else:
            # out[s, w] = x[s + w]: x repeated, read with rows of n + 1 (each row starts one element later)
            copies = -(-size * (n + 1) // n)
            flat = x.unsqueeze(-2).expand(*lead, copies, n).reshape(*lead, copies * n)
            windows = flat.shrink([None] * len(lead) + [(0, size * (n + 1))]).reshape(*lead, size, n + 1)
            windows = windows.shrink([None] * len(lead) + [None, (0, full)])
        windows = windows[(..., slice(None, None, step))] if step > 1 else windows  # [..., s, w]
        out = windows.transpose(-1, -2)  # [..., w, s]
        if self.ndim == 0:
            return out.reshape(size)
        return out.transpose(d, -2)

    def repeat_interleave(self, repeats: int | Sequence[int] | Tensor, dim: int | None = None) -> Tensor:
        """Each element repeated `repeats` times along `dim` (the flattened tensor for None): `[1, 2]` -> `[1, 1, 2,
        2]`. Per-element repeats (a list or int tensor) are read on the host: the result's size depends on them."""
        x = self.flatten() if dim is None else self
        d = 0 if dim is None else normalize_axis(dim, self.ndim, "repeat_interleave")[0]
        if isinstance(repeats, int):
            if repeats < 0:
                raise RuntimeError(f"repeat_interleave: repeats can not be negative, got {repeats}")
            x = x.unsqueeze(d + 1)
            x = x.expand([repeats if i == d + 1 else s for i, s in enumerate(x.shape)])
            return x.flatten(d, d + 1)
        counts = [int(r) for r in (repeats.numpy().reshape(-1) if isinstance(repeats, Tensor) else repeats)]
        if len(counts) == 1:
            return self.repeat_interleave(counts[0], dim)
        if len(counts) != x.shape[d] or any(r < 0 for r in counts):
            raise RuntimeError(f"repeat_interleave: repeats {counts} must be non-negative, one per element of dim {d} "
                               f"(size {x.shape[d]})")
        index = Tensor([i for i, r in enumerate(counts) for _ in range(r)], x.device, dtypes.int32)
        return x.index_select(d, index)

    def meshgrid(self: Any, *args: Tensor, indexing: str = "ij") -> tuple[Tensor, ...]:
        """Coordinate grids of 1-d tensors: `Tensor.meshgrid(x, y)` (or of a tuple of them) gives two tensors of shape
        (len(x), len(y)); `indexing="xy"` swaps the first two dims (numpy's default)."""
        tensors = tuple(self) + args if isinstance(self, (tuple, list)) else (self, *args)
        if indexing not in ("ij", "xy"):
            raise ArgumentError(f"meshgrid: indexing must be 'ij' or 'xy', got {indexing!r}")
        for i, t in enumerate(tensors):
            if not isinstance(t, Tensor) or t.ndim > 1:
                raise RuntimeError(f"meshgrid: expects 0-d or 1-d tensors, argument {i} is "
                                   f"{getattr(t, 'shape', type(t).__name__)}")
        flat = [t.reshape(-1) for t in tensors]
        shape = [t.shape[0] for t in flat]
        if indexing == "xy" and len(flat) >= 2:
            shape[0], shape[1] = shape[1], shape[0]
        out = []
        for i, t in enumerate(flat):
            at = (1 - i if i < 2 else i) if indexing == "xy" and len(flat) >= 2 else i
            out.append(t.reshape([s if j == at else 1 for j, s in enumerate(shape)]).expand(shape))
        return tuple(out)

    def clone(self) -> Tensor:
        """A copy with its own storage: later writes to either do not reach the other."""
        return self.contiguous()

    def shrink(self, bounds: Sequence[tuple[int, int] | None]) -> Tensor:
        bounds = tuple((0, s) if b is None else (int(b[0]), int(b[1])) for b, s in zip(bounds, self.shape))
        return Tensor(self.uop.shrink(bounds))

    @torch_axis_name("dims")
    def flip(self, axis: int | Sequence[int], *args: int) -> Tensor:
        """Reverse the order along `axis` (one dim or several: `x.flip(0, 1)` or `x.flip((0, 1))`)."""
        axes = normalize_axis((axis, *args) if args else axis, self.ndim, "flip")
        return Tensor(self.uop.flip(tuple(i in axes for i in range(self.ndim))))

    def view(self, *shape: Any) -> Tensor:
        """The same as reshape (every view here is lazy); given a dtype, `bitcast` (torch's `x.view(torch.int32)`)."""
        if len(shape) == 1 and isinstance(shape[0], (DType, str)):
            return self.bitcast(shape[0])
        return self.reshape(*shape)

    def view_as(self, other: Tensor) -> Tensor:
        """This tensor in `other`'s shape."""
        return self.reshape(other.shape)

    reshape_as = view_as

    def expand_as(self, other: Tensor) -> Tensor:
        """This tensor broadcast to `other`'s shape."""
        return self.expand(other.shape)

    def t(self) -> Tensor:
        """The transpose of a tensor of at most 2 dims (as torch.Tensor.t)."""
        if self.ndim > 2:
            raise ArgumentError(f"t: expects a tensor with at most 2 dims, got shape {self.shape} (use transpose)")
        return self.transpose(0, 1) if self.ndim == 2 else self

    def narrow(self, dim: int, start: int, length: int) -> Tensor:
        """`length` elements of dim `dim` from `start` (negative: from the end), as a view."""
        d = normalize_axis(dim, self.ndim, "narrow")[0]
        n = self.shape[d]
        begin = start + n if start < 0 else start
        if not 0 <= begin <= n or length < 0 or begin + length > n:
            raise IndexError(f"narrow: start {start} and length {length} are out of range for dim {d} of size {n}")
        return self.shrink([(begin, begin + length) if i == d else None for i in range(self.ndim)])

    def movedim(self, source: int | Sequence[int], destination: int | Sequence[int]) -> Tensor:
        """Move dims `source` to positions `destination`, the others keeping their order (moveaxis is the same)."""
        src = normalize_axis(source, self.ndim, "movedim")
        dst = normalize_axis(destination, self.ndim, "movedim")
        if len(src) != len(dst):
            raise ArgumentError(f"movedim: source {source} and destination {destination} must have the same length")
        rest = iter(i for i in range(self.ndim) if i not in src)
        placed = dict(zip(dst, src))
        return self.permute([placed[i] if i in placed else next(rest) for i in range(self.ndim)])

    moveaxis = movedim

    def swapdims(self, dim0: int, dim1: int) -> Tensor:
        """Swap two dims (the same as transpose)."""
        return self.transpose(dim0, dim1)

    def ravel(self) -> Tensor:
        """The elements as a 1-d tensor."""
        return self.flatten()

    def fliplr(self) -> Tensor:
        """Reverse dim 1."""
        return self.flip(1)

    def flipud(self) -> Tensor:
        """Reverse dim 0."""
        return self.flip(0)

    def rot90(self, k: int = 1, dims: Sequence[int] = (0, 1)) -> Tensor:
        """Rotate by 90 degrees k times in the plane of `dims`, from the first dim towards the second."""
        if len(dims) != 2:
            raise ArgumentError(f"rot90: dims must be two dims, got {dims}")
        a, b = normalize_axis(tuple(dims), self.ndim, "rot90")
        k %= 4
        if k == 1:
            return self.flip(b).transpose(a, b)
        if k == 2:
            return self.flip((a, b))
        if k == 3:
            return self.flip(a).transpose(a, b)
        return self

    def tile(self, *dims: Any) -> Tensor:
        """Repeat the tensor dims[i] times along dim i; fewer dims than the tensor's are padded with 1s in front."""
        reps = shape_args(dims)
        return self.repeat((1,) * (self.ndim - len(reps)) + reps)

    def select(self, dim: int, index: int) -> Tensor:
        """The slice at `index` of dim `dim`, that dim removed."""
        d = normalize_axis(dim, self.ndim, "select")[0]
        return self[(slice(None),) * d + (index,)]

    def unbind(self, dim: int = 0) -> tuple[Tensor, ...]:
        """The slices along `dim`, that dim removed from each."""
        d = normalize_axis(dim, self.ndim, "unbind")[0]
        return tuple(self.select(d, i) for i in range(self.shape[d]))

    def squeeze(self, dim: int | Sequence[int] | None = None) -> Tensor:
        """Remove size-1 dims (all of them, or those in `dim`; a named dim that is not 1 is kept, as in torch)."""
        dims = normalize_axis(dim, self.ndim, "squeeze") if dim is not None else tuple(range(self.ndim))
        return self.reshape(tuple(s for i, s in enumerate(self.shape) if not (i in dims and s == 1)))

    def unsqueeze(self, dim: int) -> Tensor:
        """Insert a size-1 dim at `dim` (-ndim-1 <= dim <= ndim)."""
        if not isinstance(dim, int) or not -self.ndim - 1 <= dim <= self.ndim:
            raise IndexError(f"unsqueeze: dim {dim} is out of range for a tensor of {self.ndim} dims "
                             f"(expected [{-self.ndim - 1}, {self.ndim}])")
        dim = dim % (self.ndim + 1)
        return self.reshape(self.shape[:dim] + (1,) + self.shape[dim:])

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Tensor:
        """Merge dims start_dim..end_dim (inclusive) into one."""
        if self.ndim == 0:
            return self.reshape(1)
        start, end = (normalize_axis(d, self.ndim, "flatten")[0] for d in (start_dim, end_dim))
        if start > end:
            raise ArgumentError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim}")
        return self.reshape(self.shape[:start] + (int(prod(self.shape[start:end + 1])),) + self.shape[end + 1:])

    def unflatten(self, dim: int, sizes: Sequence[int]) -> Tensor:
        """Split dim `dim` into `sizes` (one may be -1)."""
        d = normalize_axis(dim, self.ndim, "unflatten")[0]
        sizes = tuple(sizes)
        if sizes.count(-1) > 1:
            raise ArgumentError(f"unflatten: only one size can be -1, got {sizes}")
        known = int(prod([s for s in sizes if s != -1]))
        if -1 in sizes:
            if known == 0 or self.shape[d] % known:
                raise ArgumentError(f"unflatten: sizes {sizes} do not divide dim {d} of size {self.shape[d]}")
            sizes = tuple(self.shape[d] // known if s == -1 else s for s in sizes)
        elif known != self.shape[d]:
            raise ArgumentError(f"unflatten: sizes {sizes} multiply to {known}, dim {d} has size {self.shape[d]}")
        return self.reshape(self.shape[:d] + sizes + self.shape[d + 1:])

    def swapaxes(self, axis0: int, axis1: int) -> Tensor:
        """Swap two dims (the same as transpose)."""
        return self.transpose(axis0, axis1)

    def repeat(self, *repeats: Any) -> Tensor:
        """Tile the tensor `repeats[i]` times along dim i (as torch.Tensor.repeat; extra leading repeats add dims)."""
        reps = shape_args(repeats)
        if len(reps) < self.ndim:
            raise ArgumentError(f"repeat: needs at least {self.ndim} repeats for shape {self.shape}, got {reps}")
        if any(r < 0 for r in reps):
            raise ArgumentError(f"repeat: repeats must be non-negative, got {reps}")
        shape = (1,) * (len(reps) - self.ndim) + self.shape
        x = self.reshape([d for s in shape for d in (1, s)])
        x = x.expand([d for r, s in zip(reps, shape) for d in (r, s)])
        return x.reshape([r * s for r, s in zip(reps, shape)])

    def cat(self: Any, *args: Tensor, dim: int = 0) -> Tensor:
        """Join tensors along an existing dim: `a.cat(b, c, dim=1)` or `Tensor.cat([a, b, c], dim=1)` (all dims but
        `dim` must match)."""
        if isinstance(self, (tuple, list)):
            if not self:
                raise ValueError("cat: expected a non-empty list of Tensors")
            if len(args) == 1 and isinstance(args[0], int):  # torch's Tensor.cat([a, b], 1)
                args, dim = (), args[0]
            return self[0].cat(*self[1:], *args, dim=dim)
        tensors = (self, *args)
        for i, t in enumerate(tensors):
            if not isinstance(t, Tensor):
                raise TypeError(f"cat: argument {i} is a {type(t).__name__}, not a Tensor")
        d = normalize_axis(dim, self.ndim, "cat")[0] if self.ndim else normalize_axis(dim, 0, "cat")[0]
        if self.ndim == 0:
            raise AxisError("cat: zero-dimensional tensors cannot be concatenated (use stack)")
        for i, t in enumerate(tensors):
            if t.ndim != self.ndim or any(a != b for j, (a, b) in enumerate(zip(t.shape, self.shape)) if j != d):
                raise ShapeError(f"cat: tensor {i} has shape {t.shape}, which does not match {self.shape} "
                                 f"outside dim {d}")
        dt = least_upper_dtype(*(t.dtype for t in tensors))
        total, offset, out = sum(t.shape[d] for t in tensors), 0, None
        for t in tensors:
            pad = [(0, 0)] * self.ndim
            pad[d] = (offset, total - offset - t.shape[d])
            offset += t.shape[d]
            part = Tensor(t.cast(dt).uop.pad(tuple(pad)))
            out = part if out is None else Tensor(out.uop.alu(Ops.OR if dt == dtypes.bool else Ops.ADD, part.uop))
        assert out is not None
        return out

    def stack(self: Any, *args: Tensor, dim: int = 0) -> Tensor:
        """Join same-shape tensors along a new dim: `a.stack(b, dim=0)` or `Tensor.stack((a, b))` -> shape
        (2, *a.shape)."""
        if isinstance(self, (tuple, list)):
            if len(args) == 1 and isinstance(args[0], int):  # torch's Tensor.stack([a, b], 1)
                args, dim = (), args[0]
            if not self or args:
                raise ValueError("stack: expected one non-empty sequence of Tensors, or the Tensors as arguments")
            return self[0].stack(*self[1:], dim=dim)
        for i, t in enumerate(args):
            if not isinstance(t, Tensor):
                raise TypeError(f"stack: argument {i + 1} is a {type(t).__name__}, not a Tensor")
            if t.shape != self.shape:
                raise ShapeError(f"stack: tensor {i + 1} has shape {t.shape}, expected {self.shape} like tensor 0")
        if not -self.ndim - 1 <= dim <= self.ndim:
            raise IndexError(f"stack: dim {dim} is out of range for {self.ndim + 1} dims")
        return self.unsqueeze(dim).cat(*(t.unsqueeze(dim) for t in args), dim=dim)

    def split(self, sizes: int | Sequence[int], dim: int = 0) -> tuple[Tensor, ...]:
        """Cut along `dim` into pieces of `sizes` each (the last may be smaller), or of the listed sizes."""
        d = normalize_axis(dim, self.ndim, "split")[0]
        n = self.shape[d]
        if isinstance(sizes, int):
            if sizes <= 0:
                raise ArgumentError(f"split: split size must be positive, got {sizes}")
            sizes = [min(sizes, n - i) for i in range(0, n, sizes)] or [0]
        sizes = list(sizes)
        if sum(sizes) != n or any(s < 0 for s in sizes):
            raise ArgumentError(f"split: sizes {sizes} do not add up to dim {d} of size {n}")
        bounds = [(0, s) for s in self.shape]
        out, start = [], 0
        for s in sizes:
            bounds[d] = (start, start + s)
            out.append(self.shrink(bounds))
            start += s
        return tuple(out)

    def tensor_split(self, indices_or_sections: int | Sequence[int], dim: int = 0) -> tuple[Tensor, ...]:
        """torch.tensor_split: n pieces as equal as can be (the first n % size one longer), or cut before each of the
        listed indices."""
        d = normalize_axis(dim, self.ndim, "tensor_split")[0]
        n = self.shape[d]
        if isinstance(indices_or_sections, int):
            k = indices_or_sections
            if k <= 0:
                raise ArgumentError(f"tensor_split: number of sections must be positive, got {k}")
            return self.split([n // k + (1 if i < n % k else 0) for i in range(k)], d)
        cuts = [min(max(i + n if i < 0 else i, 0), n) for i in indices_or_sections]
        starts = [0, *cuts]
        ends = [*cuts, n]
        bounds = [(0, s) for s in self.shape]
        out = []
        for a, b in zip(starts, ends):
            bounds[d] = (a, max(a, b))
            out.append(self.shrink(bounds))
        return tuple(out)

    def hsplit(self, sections: int | Sequence[int]) -> tuple[Tensor, ...]:
        """tensor_split along dim 1 (dim 0 of a 1-d tensor); an int must divide the dim evenly."""
        return self._split_evenly(sections, 1 if self.ndim > 1 else 0, "hsplit")

    def vsplit(self, sections: int | Sequence[int]) -> tuple[Tensor, ...]:
        """tensor_split along dim 0 (of a tensor of 2 dims or more); an int must divide it evenly."""
        if self.ndim < 2:
            raise ArgumentError(f"vsplit: needs at least 2 dims, got shape {self.shape}")
        return self._split_evenly(sections, 0, "vsplit")

    def dsplit(self, sections: int | Sequence[int]) -> tuple[Tensor, ...]:
        """tensor_split along dim 2 (of a tensor of 3 dims or more); an int must divide it evenly."""
        if self.ndim < 3:
            raise ArgumentError(f"dsplit: needs at least 3 dims, got shape {self.shape}")
        return self._split_evenly(sections, 2, "dsplit")

    def _split_evenly(self, sections: int | Sequence[int], dim: int, op: str) -> tuple[Tensor, ...]:
        if isinstance(sections, int) and (sections <= 0 or self.shape[dim] % sections):
            raise ArgumentError(f"{op}: dim {dim} of size {self.shape[dim]} does not split into {sections} equal "
                                "parts")
        return self.tensor_split(sections, dim)

    def broadcast_to(self, *shape: Any) -> Tensor:
        """`expand` under numpy's and torch's name."""
        return self.expand(*shape)

    @property
    def mT(self) -> Tensor:  # noqa: N802 - torch's name
        """The last two dims swapped (a batch of matrices transposed)."""
        if self.ndim < 2:
            raise ArgumentError(f"mT: needs at least 2 dims, got shape {self.shape}")
        return self.transpose(-2, -1)

    def sequential(self, layers: Sequence[Any]) -> Tensor:
        """Each of `layers` (callables) applied in turn: `x.sequential([l1, Tensor.relu, l2])` (tinygrad's)."""
        x = self
        for layer in layers:
            x = layer(x)
        return x  # type: ignore[return-value]

    def diag_embed(self, offset: int = 0, dim1: int = -2, dim2: int = -1) -> Tensor:
        """Matrices whose diagonal `offset` holds the last dim of self (torch.diag_embed, with dim1=-2, dim2=-1)."""
        if (dim1, dim2) not in ((-2, -1), (self.ndim - 1, self.ndim)):
            raise ArgumentError(f"diag_embed: only dim1=-2, dim2=-1 are supported, got {dim1}, {dim2}")
        x = self if self.ndim else self.reshape(1)
        n = x.shape[-1] + abs(offset)
        rows = Tensor.arange(n, device=self.device).reshape(n, 1)
        cols = Tensor.arange(n, device=self.device).reshape(1, n)
        padded = x.pad([(0, 0)] * (x.ndim - 1) + [(0, abs(offset))])
        # element k of the diagonal sits in row k (offset >= 0) or in column k (offset < 0)
        vals = padded.unsqueeze(-1) if offset >= 0 else padded.unsqueeze(-2)
        return ((cols - rows) == offset).where(vals, Tensor(0, self.device, self.dtype))

    def chunk(self, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
        """Cut along `dim` into `chunks` pieces of ceil(n / chunks) each (fewer when n is small), as torch."""
        if not isinstance(chunks, int) or chunks <= 0:
            raise ArgumentError(f"chunk: chunks must be a positive int, got {chunks!r}")
        d = normalize_axis(dim, self.ndim, "chunk")[0]
        n = self.shape[d]
        return self.split(max(1, -(-n // chunks)), d)

    def _tri_mask(self, diagonal: int, upper: bool) -> Tensor:
        if self.ndim < 2:
            raise ArgumentError(f"{'triu' if upper else 'tril'}: needs at least 2 dims, got shape {self.shape}")
        r, c = self.shape[-2:]
        rows = Tensor.arange(r, device=self.device).reshape(r, 1)
        cols = Tensor.arange(c, device=self.device).reshape(1, c)
        return (cols - rows >= diagonal) if upper else (cols - rows <= diagonal)

    def tril(self, diagonal: int = 0) -> Tensor:
        """The lower triangle of the last two dims (j - i <= diagonal kept), the rest zero."""
        return self._tri_mask(diagonal, False).where(self, Tensor(0, self.device, self.dtype))

    def triu(self, diagonal: int = 0) -> Tensor:
        """The upper triangle of the last two dims (j - i >= diagonal kept), the rest zero."""
        return self._tri_mask(diagonal, True).where(self, Tensor(0, self.device, self.dtype))

    def roll(self, shifts: int | Sequence[int], dims: int | Sequence[int] | None = None) -> Tensor:
        """Shift elements along `dims` by `shifts`, wrapping around (dims=None: over the flattened tensor)."""
        if dims is None:
            if not isinstance(shifts, int):
                if len(shifts) != 1:
                    raise ArgumentError(f"roll: without dims, shifts must be one int, got {shifts!r}")
                shifts = shifts[0]
            return self.flatten().roll(shifts, 0).reshape(self.shape)
        shifts_t = (shifts,) if isinstance(shifts, int) else tuple(shifts)
        dims_t = (dims,) if isinstance(dims, int) else tuple(dims)
        if len(shifts_t) != len(dims_t):
            raise ArgumentError(f"roll: shifts {shifts_t} and dims {dims_t} must have the same length")
        x = self
        for s, d in zip(shifts_t, dims_t):
            d = normalize_axis(d, self.ndim, "roll")[0]
            n = self.shape[d]
            if n == 0 or s % n == 0:
                continue
            k = s % n
            a, b = x.split([n - k, k], d)
            x = b.cat(a, dim=d)
        return x
