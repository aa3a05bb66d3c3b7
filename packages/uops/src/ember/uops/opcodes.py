"""The op codes of the IR: `Ops` (what a UOp computes) and `GroupOp` (the ops grouped by role)."""

from __future__ import annotations

from enum import IntEnum, auto


class Ops(IntEnum):  # an IntEnum hashes in C: op lookups are on every rewrite
    # buffers and devices
    DEVICE = auto(); BUFFER = auto(); PARAM = auto(); BUFFER_VIEW = auto(); UNIQUE = auto()  # noqa: E702
    # values
    CONST = auto(); VCONST = auto(); DEFINE_VAR = auto(); BIND = auto()  # noqa: E702
    IOTA = auto()  # the index ramp 0, 1, ..., arg-1 along one axis (XLA's iota): a tensor leaf computed in place
    # movement
    RESHAPE = auto(); PERMUTE = auto(); EXPAND = auto(); PAD = auto(); SHRINK = auto(); FLIP = auto()  # noqa: E702
    # tensor-level
    CONTIGUOUS = auto(); DETACH = auto(); COPY = auto(); ASSIGN = auto(); REDUCE_AXIS = auto()  # noqa: E702
    MSTACK = auto(); MSELECT = auto()  # noqa: E702
    # indexing
    RANGE = auto(); INDEX = auto(); BUFFERIZE = auto(); REDUCE = auto(); END = auto(); SINK = auto()  # noqa: E702
    CALL = auto()
    # memory
    LOAD = auto(); STORE = auto(); DEFINE_LOCAL = auto(); DEFINE_REG = auto(); BARRIER = auto()  # noqa: E702
    # ALU: unary
    EXP2 = auto(); LOG2 = auto(); SIN = auto(); SQRT = auto(); RECIPROCAL = auto(); NEG = auto()  # noqa: E702
    TRUNC = auto()
    # ALU: binary
    ADD = auto(); MUL = auto(); IDIV = auto(); MOD = auto(); MAX = auto()  # noqa: E702
    CMPLT = auto(); CMPNE = auto(); CMPEQ = auto()  # noqa: E702
    AND = auto(); OR = auto(); XOR = auto(); SHL = auto(); SHR = auto(); FDIV = auto(); POW = auto()  # noqa: E702
    # ALU: ternary
    WHERE = auto(); MULACC = auto()  # noqa: E702
    CAST = auto(); BITCAST = auto()  # noqa: E702
    # vectors
    VECTORIZE = auto(); GEP = auto()  # noqa: E702
    # control
    IF = auto(); ENDIF = auto(); SPECIAL = auto()  # noqa: E702
    # matrix units
    WMMA = auto()
    # no-op placeholder used by passes
    NOOP = auto()

    def __repr__(self) -> str:
        return f"Ops.{self.name}"


class GroupOp:
    Unary = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIPROCAL, Ops.NEG, Ops.TRUNC})
    Binary = frozenset({Ops.ADD, Ops.MUL, Ops.IDIV, Ops.MOD, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.AND,
                        Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR, Ops.FDIV, Ops.POW})
    Ternary = frozenset({Ops.WHERE, Ops.MULACC})
    ALU = Unary | Binary | Ternary
    Elementwise = ALU | {Ops.CAST, Ops.BITCAST}
    Movement = frozenset({Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.PAD, Ops.SHRINK, Ops.FLIP})
    Commutative = frozenset({Ops.ADD, Ops.MUL, Ops.MAX, Ops.CMPNE, Ops.CMPEQ, Ops.AND, Ops.OR, Ops.XOR})
    Associative = frozenset({Ops.ADD, Ops.MUL, Ops.AND, Ops.OR, Ops.XOR, Ops.MAX})
    Idempotent = frozenset({Ops.OR, Ops.AND, Ops.MAX})
    Comparison = frozenset({Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ})
    Reduce = frozenset({Ops.ADD, Ops.MUL, Ops.MAX})  # the ops REDUCE_AXIS and REDUCE accept
    Buffer = frozenset({Ops.BUFFER, Ops.BUFFER_VIEW, Ops.PARAM})
    Defines = frozenset({Ops.PARAM, Ops.DEFINE_VAR, Ops.DEFINE_LOCAL, Ops.DEFINE_REG})
    Tensor = frozenset({Ops.CONTIGUOUS, Ops.DETACH, Ops.COPY, Ops.ASSIGN, Ops.REDUCE_AXIS, Ops.MSTACK, Ops.MSELECT})
