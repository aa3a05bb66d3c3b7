"""Readable text of a UOp graph: one line per node, shared sub-graphs printed once and referred to by number."""

from __future__ import annotations

from ember.uops.ops import UOp


def _fmt_arg(arg: object) -> str:
    if isinstance(arg, UOp):
        return f"<{arg.op.name}>"
    if isinstance(arg, tuple):
        return "(" + ", ".join(_fmt_arg(a) for a in arg) + ("," if len(arg) == 1 else "") + ")"
    return repr(arg)


def render(root: UOp, max_nodes: int = 2000) -> str:
    """The graph under `root`, sources first, as `%n = OP dtype (srcs) arg`; the last line is `root`."""
    nodes = root.toposort()
    if len(nodes) > max_nodes:
        return f"<UOp {root.op.name} {root.dtype!r}: graph of {len(nodes)} nodes, not rendered (max_nodes={max_nodes})>"
    names = {u: f"%{i}" for i, u in enumerate(nodes)}
    lines = []
    for u in nodes:
        parts = [f"{names[u]} = {u.op.name}", repr(u.dtype)]
        if u.src:
            parts.append("(" + ", ".join(names[s] for s in u.src) + ")")
        if u.arg is not None:
            parts.append(f"arg={_fmt_arg(u.arg)}")
        if u.tag is not None:
            parts.append(f"tag={u.tag!r}")
        lines.append(" ".join(parts))
    return "\n".join(lines)


_INFIX = {"ADD": "+", "MUL": "*", "IDIV": "//", "MOD": "%", "CMPLT": "<", "CMPNE": "!=", "CMPEQ": "==",
          "AND": "&", "OR": "|", "XOR": "^", "SHL": "<<", "SHR": ">>", "FDIV": "/"}


def render_expr(u: UOp) -> str:
    """An ALU expression as infix text, e.g. `((x*4)+3)`: for reading index math. Non-ALU leaves print by name."""
    memo: dict[UOp, str] = {}
    for n in u.toposort():
        s = [memo[x] for x in n.src]
        name = n.op.name
        if name == "CONST":
            memo[n] = repr(n.arg)
        elif name == "DEFINE_VAR":
            memo[n] = n.arg[0]
        elif name == "RANGE":
            memo[n] = f"r{n.arg[0]}"
        elif name in _INFIX and len(s) == 2:
            memo[n] = f"({s[0]}{_INFIX[name]}{s[1]})"
        elif name == "WHERE":
            memo[n] = f"({s[0]}?{s[1]}:{s[2]})"
        else:
            memo[n] = f"{name.lower()}({', '.join(s)})"
    return memo[u]
