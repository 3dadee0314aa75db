"""The random program generator: `generate(seed) -> Program`.

A program is built one statement at a time from templates grouped by feature (reuse, reduce, views, inplace,
input_mutation, casts, floordiv, index, dynamic, pointwise; a fifth of the programs end with an attention). Each
candidate statement is run eagerly on the program's own inputs (at every call size) before it is kept, so templates
may be loose: a statement eager rejects (a shape mismatch, an in-place write to an expanded view, an integer division
by zero) is simply dropped.

Sizes come from small sets where equal sizes are common: symbols N, M, B with M == N half the time (square
matrices, [B, N, N]), sizes 1..6, fixed 1s for broadcasting.
"""

from __future__ import annotations

import random
import re
import warnings
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch
import torch.nn.functional as F

from tests.fuzz.program import DTYPE_NAMES, InputSpec, Program, Statement

FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
INTS = (torch.int8, torch.int32, torch.int64)
ALL_DTYPES = (torch.bool, *INTS, *FLOATS)
SCALARS = ("2", "3", "0.5", "0.7", "-0.3", "0.1", "-2", "1.5", "-1")
MAX_ELEMENTS = 2048
# How often each program theme is drawn; the rest of a program's statements come from every template.
THEMES = {"reuse": 3, "reduce": 3, "views": 3, "inplace": 3, "input_mutation": 2, "casts": 3, "floordiv": 2,
          "index": 1, "dynamic": 3}


def dt(dtype: torch.dtype) -> str:
    return f"torch.{DTYPE_NAMES[dtype]}"


class Builder:
    """The program so far, and its values (run eagerly at every call size) for the templates to look at."""

    def __init__(self, rng: random.Random, program: Program) -> None:
        self.rng = rng
        self.program = program
        self.statements: list[Statement] = []
        self.inputs = [program.make_inputs(sizes) for sizes in program.size_sets]
        namespaces = self.run([])
        assert namespaces is not None
        self.namespaces = namespaces
        self.counter = 0
        self.tainted: set[str] = set()

    # -- running -------------------------------------------------------------------------------
    def run(self, statements: list[Statement]) -> list[dict[str, Any]] | None:
        found = []
        for inputs in self.inputs:
            namespace: dict[str, Any] = {"torch": torch, "F": F}
            namespace.update({spec.name: x.clone() for spec, x in zip(self.program.inputs, inputs)})
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    for statement in statements:
                        exec(statement.text, namespace)  # noqa: S102 - our own program text
            except Exception:  # noqa: BLE001 - eager rejects the candidate: drop it
                return None
            found.append(namespace)
        return found

    def add(self, text: str | None, feature: str) -> bool:
        if text is None:
            return False
        candidate = [*self.statements, Statement(text, (feature,))]
        namespaces = self.run(candidate)
        if namespaces is None:
            return False
        target = text.split("=")[0].strip() if _defines(text) else None
        for namespace in namespaces:
            if target is not None:
                value = namespace.get(target)
                if not isinstance(value, torch.Tensor) or value.numel() > MAX_ELEMENTS or value.dim() > 4:
                    return False
        read = {name for name in self.names() if re.search(rf"\b{name}\b", text.split("=", 1)[-1])}
        tainted = bool(read & self.tainted)
        if tainted and DISCONTINUOUS.search(text):
            return False  # a step function of a value that may legitimately differ by an ulp: not comparable
        written = target or text.split("[")[0].split(".")[0].split(" ")[0].strip()
        value = namespaces[0].get(written)
        computes = feature != "views" and not PURE_CAST.match(text)
        if tainted or (computes and (ROUNDS.search(text) or (isinstance(value, torch.Tensor)
                                                            and value.dtype in (torch.float16, torch.bfloat16)))):
            self.tainted.add(written)
        self.statements = candidate
        self.namespaces = namespaces
        return True

    # -- looking at values ------------------------------------------------------------------------
    def names(self) -> list[str]:
        inputs = [spec.name for spec in self.program.inputs]
        defined = [s.text.split("=")[0].strip() for s in self.statements if _defines(s.text)]
        return inputs + [name for name in defined if name not in inputs]

    def value(self, name: str) -> torch.Tensor:
        return self.namespaces[0][name]  # type: ignore[no-any-return]

    def pick(self, where: Callable[[torch.Tensor], bool] = lambda x: True, inputs: bool | None = None) -> str | None:
        input_names = {spec.name for spec in self.program.inputs}
        names = [n for n in self.names() if where(self.value(n))
                 and (inputs is None or (n in input_names) == inputs)]
        if not names:
            return None
        # Recent values are picked more often: programs become chains rather than flat lists.
        weights = [1 + i for i in range(len(names))]
        return self.rng.choices(names, weights)[0]

    def dim(self, name: str) -> int | None:
        rank = self.value(name).dim()
        return None if rank == 0 else self.rng.randrange(-rank, rank)

    def new(self) -> str:
        self.counter += 1
        return f"t{self.counter}"

    def scalar(self) -> str:
        return self.rng.choice(SCALARS)

    def choice(self, options: Any) -> Any:
        return self.rng.choice(list(options))


# Values that may legitimately differ from eager by an ulp or two: half-precision arithmetic (eager rounds every
# intermediate, a fused kernel keeps float32), reductions (another summation order), transcendental functions.
# A step function of such a value (floor, %, a comparison, a cast to an integer) turns the ulp into a jump.
ROUNDS = re.compile(r"@|exp|sigmoid|tanh|gelu|sqrt|norm|softmax|attention|mean|sum|var|std| / |logsumexp|cumsum")
DISCONTINUOUS = re.compile(r"//|%|fmod|remainder|rounding_mode|floor|ceil|round|trunc|[<>]|!=|==|argmax|"
                           r"\.to\(torch\.(int|bool)|masked_fill|where")
PURE_CAST = re.compile(r"^\w+ = \w+(\.to\(torch\.\w+\))+$")


def _defines(text: str) -> bool:
    head = text.split("=")[0]
    return "=" in text and head.strip().isidentifier() and not text.split("=")[1].startswith("=") and \
        text.split("=")[0][-1:] not in "+-*/%|&<>!"


def is_float(x: torch.Tensor) -> bool:
    return x.dtype.is_floating_point


def is_int(x: torch.Tensor) -> bool:
    return not x.dtype.is_floating_point and x.dtype != torch.bool


def ranked(rank: int) -> Callable[[torch.Tensor], bool]:
    return lambda x: x.dim() >= rank


def square(x: torch.Tensor) -> bool:
    return x.dim() >= 2 and x.shape[-1] == x.shape[-2]


# -- templates: each returns one line of Python or None ------------------------------------------------
def reuse(b: Builder) -> str | None:
    a = b.pick(ranked(1))
    if a is None:
        return None
    d, other = b.dim(a), b.pick(lambda x: x.dim() == b.value(a).dim())
    form = b.rng.randrange(9)
    if form == 0:
        return f"{b.new()} = torch.cat([{a}, {a}, {other}], {d})"
    if form == 1:
        return f"{b.new()} = {a} * {a}"
    if form == 2:
        mask = b.pick(lambda x: x.dtype == torch.bool) or f"{a} > 0"
        return f"{b.new()} = torch.where({mask}, {a}, {a})"
    if form == 3:
        return f"{b.new()} = torch.stack([{a}, {other}, {a}], {b.rng.randrange(-b.value(a).dim() - 1, 1)})"
    if form == 4 and square(b.value(a)):
        return f"{b.new()} = {a} + {a}.transpose(-1, -2)"
    if form == 5:
        return f"{b.new()} = torch.where({a} > {other}, {a}, {other} * {b.scalar()}) - {a}"
    if form == 6 and square(b.value(a)) and is_float(b.value(a)):
        return f"{b.new()} = {a} @ {a}"
    if form == 7:
        return f"{b.new()} = torch.cat([{a}, {a}], {d}) + torch.cat([{other}, {a}], {d})"
    return f"{b.new()} = {a} - {a} * {b.scalar()} + {a}.flip({d})"


def reduce(b: Builder) -> str | None:
    a = b.pick(lambda x: is_float(x) and x.dim() >= 1)
    if a is None:
        return None
    d, d2 = b.dim(a), b.dim(a)
    keep = b.choice(("True", "False"))
    form = b.rng.randrange(15)
    name = b.new()
    forms = [
        f"{name} = {a} / ({a}.abs().sum({d}, keepdim={keep}) + 1)",
        f"{name} = {a} - {a}.amax({d}, keepdim={keep})",
        f"{name} = {a} - {a}.mean({d})",
        f"{name} = {a} * {a}.mean({d}, keepdim=True) + {a}.amin({d2}, keepdim={keep})",
        f"{name} = torch.softmax({a}, {d})",
        f"{name} = torch.log_softmax({a}, {d})",
        f"{name} = F.layer_norm({a}, {a}.shape[-1:])",
        f"{name} = {a} / {a}.norm(dim={d}, keepdim={keep}).clamp_min(0.5)",
        f"{name} = {a}.var({d}, keepdim={keep}) + {a}.std({d2}, keepdim=True)",
        f"{name} = torch.logsumexp({a}, {d}) - {a}.sum()",
        f"{name} = ({a} - {a}.mean({d}, keepdim=True)) / ({a}.var({d}, keepdim=True, correction=0) + 1e-5).sqrt()",
        f"{name} = {a} * {a}.sum() / ({a}.abs().sum() + 1)",
        f"{name} = {a}.mean(0) + {a}.sum({d}, keepdim={keep})",
        f"{name} = torch.cumsum({a}, {d}) + {a}.argmax({d2}, keepdim=True)",
        # attention over one tensor used as q, k and v (decompose/attention.py matches it on 4-D values)
        f"{name} = torch.softmax({a} @ {a}.transpose(-2, -1) * 0.5, -1) @ {a} if {a}.dim() >= 2 else {a}",
    ]
    return forms[form]


def views(b: Builder) -> str | None:
    a = b.pick(ranked(1))
    if a is None:
        return None
    x, d = b.value(a), b.dim(a)
    n = x.shape[d] if d is not None else 1
    name = b.new()
    form = b.rng.randrange(15)
    if form == 0:
        return f"{name} = {a}[..., ::2]"
    if form == 1:
        return f"{name} = {a}[{b.rng.randrange(max(n, 1))}::{b.rng.choice((2, 3))}]"
    if form == 2:
        ones = [i for i, s in enumerate(x.shape) if s == 1]
        shape = [b.rng.choice((2, 3, 4)) if i in ones else -1 for i in range(x.dim())]
        if not ones:
            return f"{name} = {a}.unsqueeze(0).expand(2, *{a}.shape)"
        return f"{name} = {a}.expand({', '.join(map(str, shape))})"
    if form == 3:
        return f"{name} = {a}.transpose(0, -1)"
    if form == 4:
        order = list(range(x.dim()))
        b.rng.shuffle(order)
        return f"{name} = {a}.permute({', '.join(map(str, order))})"
    if form == 5 and x.dim() >= 2:
        return f"{name} = {a}.diagonal({b.rng.choice((0, 0, 1, -1))}, -2, -1)"
    if form == 6:
        return f"{name} = {a}.select({d}, {b.rng.randrange(-n, n) if n else 0})"
    if form == 7:
        return f"{name} = {a}.unsqueeze({b.rng.randrange(-x.dim() - 1, x.dim() + 1)})"
    if form == 8:
        return f"{name} = {a}.reshape(-1)"
    if form == 9 and x.dim() >= 2:
        if b.rng.random() < 0.5:
            return f"{name} = {a}.reshape({x.shape[0]}, -1)"
        return f"{name} = {a}.view(-1, {x.shape[-1]})"
    if form == 10:
        start = b.rng.randrange(max(n, 1)) if n else 0
        return f"{name} = {a}.narrow({d}, {start}, {b.rng.randrange(n - start + 1) if n else 0})"
    if form == 11:
        return f"{name} = {a}.t()" if x.dim() <= 2 else f"{name} = {a}.mT"
    if form == 12:
        return f"{name} = {a}.squeeze()"
    return f"{name} = {a}[{b.rng.randrange(max(n, 1))}:, ::2].flip({d})" if x.dim() >= 2 else f"{name} = {a}.flip(0)"


def inplace(b: Builder) -> str | None:
    """A write to an intermediate: often a fresh clone, often through a view of it."""
    if b.rng.random() < 0.4:
        a = b.pick(ranked(1))
        return f"{b.new()} = {a}.clone()" if a else None
    y = b.pick(ranked(1), inputs=False)
    if y is None:
        return None
    return _write(b, y)


def input_mutation(b: Builder) -> str | None:
    a = b.pick(ranked(1), inputs=True)
    return _write(b, a) if a else None


def _write(b: Builder, y: str) -> str | None:
    x = b.value(y)
    if torch._debug_has_internal_overlap(x) != 0:  # several elements share memory (an expand): writes are undefined
        return None
    # Never a view of `y` itself: an in-place op reading memory it writes is undefined in eager PyTorch.
    other = b.pick(lambda v: v.dim() <= x.dim() and v.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
                   ) or "1"
    index = b.rng.randrange(x.shape[0]) if x.shape[0] else 0
    forms = [
        f"{y}[:, 0] = 0" if x.dim() >= 2 else f"{y}[0] = 0",
        f"{y}[..., ::2] *= 3",
        f"{y}.diagonal().fill_(1)" if x.dim() >= 2 else f"{y}.fill_({b.scalar()})",
        f"{y}.add_({other})",
        f"{y}.relu_()",
        f"{y}[{index}] = {other}" if x.dim() >= 2 else f"{y}[{index}] = {b.scalar()}",
        f"{y}.mul_({b.scalar()})",
        f"{y}.copy_({other})",
        f"{y}.clamp_(min={b.scalar()})",
        f"{y}.masked_fill_({y} > 0, {b.scalar()})",
        f"{y} += {other}",
        f"{y}[1:] = {y}[:-1].clone()",
        f"{y}.transpose(0, -1)[0].sub_(1)",
        f"{y}.zero_()",
        f"torch.relu_({y}[::2])",
        f"{y}.sigmoid_()",
    ]
    return b.choice(forms)


def casts(b: Builder) -> str | None:
    a = b.pick()
    if a is None:
        return None
    x, target = b.value(a), b.choice(ALL_DTYPES)
    name = b.new()
    if x.dtype.is_floating_point and not target.is_floating_point and target != torch.bool:
        # Out-of-range float-to-int casts are undefined in C and differ between backends: keep them in range.
        info = torch.iinfo(target)
        values = [ns[a].double() for ns in b.namespaces]
        limit = min(info.max, 2**31)
        if not all(bool(v.isfinite().all()) and float(v.abs().amax()) < limit for v in values if v.numel()):
            return None
    form = b.rng.randrange(8)
    if form == 0:
        middle = b.choice(FLOATS)
        return f"{name} = {a}.to({dt(middle)}).to({dt(target)})"
    if form == 1:
        return f"{name} = {a}.to({dt(target)}) * {b.scalar()}"
    if form == 2:
        other = b.pick() or a
        return f"{name} = {a}.to({dt(target)}) + {other}"
    if form == 3 and x.dtype.is_floating_point:
        return f"{name} = torch.round({a}) + torch.trunc({a} * 10) + torch.floor({a}) - torch.ceil({a})"
    if form == 4:
        return f"{name} = {a}.to({dt(target)}).to({dt(x.dtype)}) - {a}"
    if form == 5:
        return f"{name} = ({a} > {b.scalar()}).to({dt(target)})"
    if form == 6 and x.dtype.is_floating_point:
        return f"{name} = {a}.to(torch.float16) + {a}.to(torch.bfloat16)"
    return f"{name} = {a}.to({dt(target)})"


def floordiv(b: Builder) -> str | None:
    a = b.pick(lambda x: x.dtype != torch.bool)
    if a is None:
        return None
    other = b.pick(lambda x: x.dtype != torch.bool) or a
    s = b.choice(("0.1", "0.7", "-0.3", "3", "-2", "2.5", "-0.7"))
    name = b.new()
    return b.choice([
        f"{name} = {a} // {other}", f"{name} = {a} // {s}", f"{name} = {a} % {other}", f"{name} = {a} % {s}",
        f"{name} = torch.remainder({a}, {s})", f"{name} = torch.fmod({a}, {s})", f"{name} = torch.fmod({a}, {other})",
        f"{name} = torch.div({a}, {other}, rounding_mode='floor')",
        f"{name} = torch.div({a}, {s}, rounding_mode='trunc')",
        f"{name} = torch.div({a}, {other}, rounding_mode='trunc')", f"{name} = torch.floor_divide({a}, {s})",
        f"{name} = {s} // {a}", f"{name} = torch.remainder({a}, {other})",
    ])


def index(b: Builder) -> str | None:
    idx = b.pick(lambda x: x.dtype == torch.int64, inputs=True)
    a = b.pick(ranked(1))
    if idx is None or a is None:
        return None
    name = b.new()
    return b.choice([
        f"{name} = {a}[{idx}]", f"{name} = {a}.index_select(0, {idx})",
        f"{name} = {a}[:, {idx}]" if b.value(a).dim() >= 2 else f"{name} = {a}[{idx}] * 2",
        f"{name} = torch.gather({a}, 0, {idx}.reshape(-1, *[1] * ({a}.dim() - 1)).expand(-1, *{a}.shape[1:]))",
        f"{name} = {a}.clone().index_add_(0, {idx}, {a}[{idx}])",
        f"{name} = {a}.clone().index_put_(({idx},), {a}[{idx}] * 2, accumulate=True)",
        f"{name} = F.embedding({idx}.remainder({a}.shape[0]), {a}.reshape({a}.shape[0], -1)) * 2",
        f"{name} = {a}[-{idx}.remainder({a}.shape[0]) - 1] + torch.arange({idx}.shape[0]).reshape(-1, "
        f"*[1] * ({a}.dim() - 1))",
        f"{name} = F.pad({a} * 2, (1, 2), value=-1.5) if {a}.dim() else {a}",
        f"{name} = F.pad({a}, (-1, 1)) + 1 if {a}.dim() and {a}.shape[-1] > 1 else {a}",
        f"{name} = torch.roll({a} + 1, 2, 0) * {a}",
        f"{name} = torch.cat([{a}[:0], {a}, {a}], 0).sum(0)",
        f"{name} = torch.zeros_like({a}).scatter(0, {idx}.remainder({a}.shape[0])[:1].reshape("
        f"1, *[1] * ({a}.dim() - 1)).expand(1, *{a}.shape[1:]), 1.0) + {a}",
        f"{name} = torch.full_like({a}, 2) * {a}.new_ones({a}.shape) + torch.ones_like({a})",
        # a gather of a computed value (decompose/hoist.py moves it ahead of the pointwise ops)
        f"{name} = torch.tanh({a} * 0.5 + 1)[{idx}.remainder({a}.shape[0])]",
        f"{name} = torch.gather(torch.log_softmax({a} * 1.0, -1), -1, torch.zeros(*{a}.shape[:-1], 1, "
        f"dtype=torch.long) + {idx}[:1].remainder({a}.shape[-1])) if {a}.dim() and {a}.shape[-1] else {a}",
    ])


def pointwise(b: Builder) -> str | None:
    a = b.pick()
    if a is None:
        return None
    other = b.pick() or a
    name = b.new()
    return b.choice([
        f"{name} = {a} + {other}", f"{name} = {a} * {other} - {b.scalar()}", f"{name} = torch.maximum({a}, {other})",
        f"{name} = torch.sigmoid({a} * 1.0)", f"{name} = torch.where({a} > {other}, {a}, {other})",
        f"{name} = {a} / ({other} * 1.0).abs().add(1)", f"{name} = torch.tanh({a} * 1.0) * {other}",
        f"{name} = torch.clamp({a}, -1, 2)", f"{name} = F.gelu({a} * 1.0)", f"{name} = ({a} != {other}) & ({a} > 0)",
        f"{name} = {a}.abs().sqrt()", f"{name} = torch.exp({a} * 0.1) - 1",
    ])


def dynamic(b: Builder) -> str | None:
    a = b.pick(ranked(1))
    if a is None:
        return None
    name = b.new()
    return b.choice([
        f"{name} = {a} * 2 if {a}.shape[0] > 4 else {a} * 3",
        f"{name} = {a}[:min({a}.shape[0], 5)]",
        f"{name} = torch.arange({a}.shape[0])",
        f"{name} = {a} + torch.arange({a}.shape[0]).reshape(-1, *[1] * ({a}.dim() - 1))",
        f"{name} = {a}.sum(0) / {a}.shape[0]",
        f"{name} = {a}.reshape({a}.shape[0], -1)",
        f"{name} = {a}[{a}.shape[0] // 2]",
        f"{name} = {a}.new_ones({a}.shape[0]) * {a}.shape[-1]",
        f"{name} = {a}.narrow(0, 0, {a}.shape[0] - 1)",
        f"{name} = {a} - {a}.mean() * ({a}.numel() > 8)",
        f"{name} = {a}[-1] if {a}.shape[0] % 2 else {a}[0]",
        f"{name} = torch.full(({a}.shape[0],), {a}.shape[0] * 0.5)",
        f"{name} = {a}.view(-1, *{a}.shape[1:])[::2]",
    ])


def attention(b: Builder) -> str | None:
    """PyTorch's fused attention over a 4-D form of one value: q (sometimes k) computed pointwise from a transposed
    view, as a rotary embedding returns it (eager lays the result out in the view's order), the same tensor as q, k
    and v, a causal mask, the result transposed back and reshaped as a model does."""
    # float32 and float64 only: in half precision an attention with large scores is ill-conditioned in its query,
    # and a fused kernel rounds the query once where eager rounds after each op (seed 300217: a bf16 output 0.22 away
    # from eager's, and exactly eager's with the query rounded once), which no per-dtype tolerance can tell from a bug
    a = b.pick(lambda x: x.dtype in (torch.float32, torch.float64) and x.dim() >= 2 and x.numel() > 0)
    if a is None:
        return None
    x4 = f"{a}[None, None]" if b.value(a).dim() == 2 else f"{a}.reshape(-1, *{a}.shape[-3:])" \
        if b.value(a).dim() >= 3 else None
    if x4 is None:
        return None
    # as rotary: pointwise ops on a transposed layout ([B, H, L, D] stored as [B, L, H, D]); or back to row-major
    heads = f"{x4}.transpose(1, 2).contiguous().transpose(1, 2)"
    turned = f"({heads} * {b.scalar()} + {heads}.flip(-1))" if b.rng.random() < 0.7 else \
        f"({x4}.transpose(1, 2) * {b.scalar()} + {x4}.transpose(1, 2).flip(-1)).transpose(1, 2)"
    causal = b.choice(("True", "False"))
    name = b.new()
    form = b.rng.randrange(4)
    if form == 0:
        return f"{name} = F.scaled_dot_product_attention({turned}, {x4}, {x4}, is_causal={causal})"
    if form == 1:
        return f"{name} = F.scaled_dot_product_attention({turned}, {turned}, {x4} * 2, is_causal={causal})"
    if form == 2:
        return f"{name} = F.scaled_dot_product_attention({x4}, {x4}, {x4}, is_causal={causal})"
    return (f"{name} = F.scaled_dot_product_attention({turned}, {x4}, {x4}, is_causal={causal}).transpose(1, 2)"
            f".reshape({x4}.shape[0], {x4}.shape[2], -1)")


TEMPLATES: dict[str, Callable[[Builder], str | None]] = {
    "reuse": reuse, "reduce": reduce, "views": views, "inplace": inplace, "input_mutation": input_mutation,
    "casts": casts, "floordiv": floordiv, "index": index, "dynamic": dynamic, "pointwise": pointwise,
}


# -- whole programs --------------------------------------------------------------------------------------------
def _sizes(rng: random.Random) -> dict[str, int]:
    n = rng.choice((1, 2, 3, 3, 4, 4, 5, 6))
    m = n if rng.random() < 0.5 else rng.randint(1, 6)
    return {"N": n, "M": m, "B": rng.choice((1, 2, 2, 3))}


SHAPES: tuple[tuple[str | int, ...], ...] = (
    ("N", "N"), ("N", "N"), ("N", "M"), ("B", "N", "N"), ("B", "N", "M"), ("N",), ("M",), (1, "N"), ("N", 1),
    ("B", 1, "N"), (), ("N", "M", "N"),
)


def _input(rng: random.Random, name: str, theme: str, first: tuple[str | int, ...] | None,
           dynamic: bool) -> InputSpec:
    shape = first if first is not None and rng.random() < 0.5 else rng.choice(SHAPES)
    if dynamic:
        rest = tuple("M" if s == "N" and rng.random() < 0.85 else s for s in shape[1:])
        shape = ("N", *rest)
    roll = rng.random()
    if theme == "index" and name == "i":
        return InputSpec(name, (rng.choice((1, 2, 3, 4)),), torch.int64, "index", high="N")
    if roll < 0.12 or (theme in ("casts", "floordiv") and roll < 0.35):
        return InputSpec(name, shape, rng.choice(INTS), "int")
    if roll < 0.17:
        return InputSpec(name, shape, torch.bool, "bool")
    if theme in ("casts", "floordiv") or roll < 0.3:
        dtype = rng.choice(FLOATS)
        half = dtype in (torch.float16, torch.bfloat16)
        return InputSpec(name, shape, dtype, "grid", scale=1.0 if half else rng.choice((1.0, 1.0, 0.5, 3.0)))
    dtype = torch.float32 if rng.random() < 0.7 else rng.choice(FLOATS)
    scale = 2.0 if dtype in (torch.float16, torch.bfloat16) else rng.choice((1.0, 1.0, 3.0, 10.0))
    return InputSpec(name, shape, dtype, "randn", scale=scale)


def generate(seed: int) -> Program:
    """A valid program (eager runs it at every call size), the same for the same seed."""
    rng = random.Random(seed)
    theme = rng.choices(list(THEMES), list(THEMES.values()))[0]
    is_dynamic = theme == "dynamic"
    sizes = _sizes(rng)
    call_sizes = None
    if is_dynamic:
        # fusionlab's dynamic=True makes leading dimensions symbolic: mostly vary only those (N leads every input);
        # sometimes capture at 1 or keep square inputs square, which it may refuse, clearly.
        if sizes["N"] == 1 and rng.random() < 0.9:
            sizes["N"] = rng.randint(2, 6)
        call_sizes = dict(sizes)
        call_sizes["N"] = rng.choice([n for n in range(1, 8) if n != sizes["N"]])
        if sizes["M"] == sizes["N"] and rng.random() < 0.15:
            call_sizes["M"] = call_sizes["N"]  # square stays square
    count = rng.choice((1, 2, 2, 3))
    names = ["a", "b", "c"][:count] + (["i"] if theme == "index" else [])
    specs: list[InputSpec] = []
    for name in names:
        specs.append(_input(rng, name, theme, specs[0].shape if specs else None, is_dynamic))
    runners = ("explore", "compile") if rng.random() < 0.15 else ("explore",)
    program = Program(seed, tuple(specs), (), (), sizes, call_sizes, is_dynamic, runners, input_seed=seed)
    for attempt in range(20):  # inputs are never all zeros (a bool input may be all False: draw again)
        candidate = Program(seed, tuple(specs), (), (), sizes, call_sizes, is_dynamic, runners,
                            input_seed=seed * 100 + attempt)
        if all(bool(x.any()) for s in candidate.size_sets for x in candidate.make_inputs(s) if x.numel()):
            program = candidate
            break
    builder = Builder(rng, program)
    wanted = rng.randint(2, 6)
    attempts = 0
    while sum(1 for _ in builder.statements) < wanted and attempts < 60:
        attempts += 1
        group = theme if rng.random() < 0.6 else rng.choice([t for t in TEMPLATES if t != "dynamic" or is_dynamic])
        builder.add(TEMPLATES[group](builder), group)
    # a fifth of the programs end with a fused attention (drawn apart from `rng`: the statements before stay the same)
    side = random.Random(seed * 7919 + 3)
    if side.random() < 0.2:
        main, builder.rng = builder.rng, side
        builder.add(attention(builder), "attention")
        builder.rng = main
    defined = [n for n in builder.names() if n not in {s.name for s in specs}]
    outputs = defined[-1:] or [specs[0].name]
    for name in defined[:-1]:
        if rng.random() < 0.25:
            outputs.append(name)
    if rng.random() < 0.1:
        outputs.append(specs[0].name)
    mutated = _mutates_inputs(builder)
    extra = ("input_mutation",) if mutated else ()
    # a third of the programs loop over every reduction's rows (drawn apart from `rng`: the programs stay the same)
    looped = random.Random(seed * 7919 + 1).random() < 0.3
    # a quarter of those that write no input also train through the backend (backward of a weighted sum of outputs)
    # where eager can: those with floating inputs
    if not mutated and random.Random(seed * 7919 + 2).random() < 0.25:
        runners = (*runners, "train")
    made = Program(seed, program.inputs, tuple(builder.statements), tuple(dict.fromkeys(outputs)), sizes, call_sizes,
                   is_dynamic, runners, program.input_seed, extra, looped)
    if "train" in runners and not _trains_in_eager(made):
        made = replace(made, runners=runners[:-1])
    return made


def _trains_in_eager(program: Program) -> bool:
    """Eager autograd runs the program's forward and backward, and some input gets a gradient (an in-place write
    to a value backward needs, an op without a derivative: eager raises; integer inputs have no gradient)."""
    from tests.fuzz.oracle import backpropagate

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for sizes in program.size_sets:
                inputs = program.make_inputs(sizes)
                for x in inputs:
                    x.requires_grad_(x.is_floating_point())
                backpropagate(program.function()(*inputs), seed=0)
                if not any(x.grad is not None for x in inputs):
                    return False
    except Exception:  # noqa: BLE001 - any failure of eager's own
        return False
    return True


def _mutates_inputs(builder: Builder) -> bool:
    for inputs, namespace in zip(builder.inputs, builder.namespaces):
        for spec, original in zip(builder.program.inputs, inputs):
            now = namespace[spec.name]
            if now.shape != original.shape or not torch.equal(now, original):
                return True
    return False
