"""A random program as data: its inputs (each a one-line recipe), its statements (one line of Python each) and the
names it returns. It renders as a Python function and as a runnable repro, so a failure prints as code.

    >>> a = InputSpec("a", ("N", "N"), torch.float32, "randn")
    >>> program = Program(0, (a,), (Statement("t0 = a * a", ("reuse",)),), ("t0",), {"N": 3})
    >>> print(program.source())
    def f(a):
        t0 = a * a
        return (t0,)
"""

from __future__ import annotations

import linecache
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import torch
import torch.nn.functional as F

# Values that are not binary fractions (0.1, 0.7, -0.3), that sit on rounding ties (2.5, -1.5, 0.5) or that are
# large enough to lose bits in a half-precision cast (12.3, 100.3).
GRID = (0.1, 0.7, -0.3, 2.5, -1.5, 0.5, -2.5, 3.7, -0.7, 1.0, -1.0, 12.3, 100.3, -6.5)
DTYPE_NAMES = {torch.bool: "bool", torch.int8: "int8", torch.int32: "int32", torch.int64: "int64",
               torch.float16: "float16", torch.bfloat16: "bfloat16", torch.float32: "float32",
               torch.float64: "float64"}


@dataclass(frozen=True)
class InputSpec:
    """One input: `shape` holds symbol names ("N") or fixed ints; `kind` is the recipe."""

    name: str
    shape: tuple[str | int, ...]
    dtype: torch.dtype
    kind: str  # "randn" | "grid" | "int" | "bool" | "index"
    scale: float = 1.0
    high: str | int = 1  # "index": values in [0, high)

    def recipe(self, sizes: Mapping[str, int]) -> str:
        """The Python expression that makes this input (reads a generator `g`)."""
        shape = tuple(sizes[s] if isinstance(s, str) else s for s in self.shape)
        dtype = f"torch.{DTYPE_NAMES[self.dtype]}"
        if self.kind == "randn":
            return f"torch.randn({shape}, generator=g, dtype=torch.float64).mul({self.scale}).to({dtype})"
        if self.kind == "grid":
            # Half precision gets the small values only: eager rounds every intermediate and a fused kernel does
            # not, so where large values cancel the two differ by more than any tolerance.
            grid = GRID[:11] if self.dtype in (torch.float16, torch.bfloat16) else GRID
            return (f"torch.tensor({list(grid)}, dtype=torch.float64)[torch.randint(0, {len(grid)}, {shape}, "
                    f"generator=g)].mul({self.scale}).to({dtype})")
        if self.kind == "int":  # never zero: integer divisors stay legal
            return (f"(torch.randint(1, 10, {shape}, generator=g) "
                    f"* (torch.randint(0, 2, {shape}, generator=g) * 2 - 1)).to({dtype})")
        if self.kind == "bool":
            return f"torch.randint(0, 2, {shape}, generator=g).bool()"
        high = sizes[self.high] if isinstance(self.high, str) else self.high
        return f"torch.randint(0, {high}, {shape}, generator=g)"


@dataclass(frozen=True)
class Statement:
    text: str
    features: tuple[str, ...]


@dataclass(frozen=True)
class Program:
    seed: int
    inputs: tuple[InputSpec, ...]
    statements: tuple[Statement, ...]
    outputs: tuple[str, ...]
    sizes: dict[str, int]
    call_sizes: dict[str, int] | None = None  # dynamic programs: captured at `sizes`, then called at these
    dynamic: bool = False
    runners: tuple[str, ...] = ("explore",)
    input_seed: int = 0
    extra_features: tuple[str, ...] = field(default=())
    looped: bool = False  # explore with looped_reductions=True: every reduction loops over its rows

    @property
    def features(self) -> tuple[str, ...]:
        found = {f for s in self.statements for f in s.features} | set(self.extra_features)
        if self.dynamic:
            found.add("dynamic")
        if self.looped:
            found.add("looped")
        return tuple(sorted(found))

    @property
    def size_sets(self) -> tuple[dict[str, int], ...]:
        """Capture sizes first, then the other call sizes (dynamic programs)."""
        return (self.sizes,) if self.call_sizes is None else (self.sizes, self.call_sizes)

    def source(self, name: str = "f") -> str:
        arguments = ", ".join(spec.name for spec in self.inputs)
        body = [f"    {s.text}" for s in self.statements]
        returned = ", ".join(self.outputs) + ","
        return "\n".join([f"def {name}({arguments}):", *body, f"    return ({returned})"]) + "\n"

    def function(self) -> Callable[..., Any]:
        """The program as a Python function; its source is registered so tracebacks and Dynamo show the lines."""
        filename = f"<fuzz program {self.seed}>"
        text = self.source()
        linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
        namespace: dict[str, Any] = {"torch": torch, "F": F}
        exec(compile(text, filename, "exec"), namespace)  # noqa: S102 - the program is ours
        return namespace["f"]  # type: ignore[no-any-return]

    def input_lines(self, sizes: Mapping[str, int]) -> list[str]:
        lines = []
        for spec in self.inputs:  # one generator per input: dropping an input leaves the others' values alone
            lines += [f"g = torch.Generator().manual_seed({self.generator_seed(spec)})",
                      f"{spec.name} = {spec.recipe(sizes)}"]
        return lines

    def generator_seed(self, spec: InputSpec) -> int:
        return self.input_seed * 10 + "abcdefghij".index(spec.name[0])

    def make_inputs(self, sizes: Mapping[str, int]) -> list[torch.Tensor]:
        namespace: dict[str, Any] = {"torch": torch}
        exec("\n".join(self.input_lines(sizes)), namespace)  # noqa: S102
        return [namespace[s.name] for s in self.inputs]

    def with_statements(self, statements: tuple[Statement, ...], outputs: tuple[str, ...]) -> Program:
        used = " ".join(s.text for s in statements) + " " + " ".join(outputs)
        inputs = tuple(spec for spec in self.inputs if _mentions(used, spec.name)) or self.inputs[:1]
        return replace(self, statements=statements, outputs=outputs, inputs=inputs)

    def repro(self, runner: str, headline: str = "") -> str:
        """A standalone script that runs the program through fusionlab and eager and asserts they agree."""
        sizes = [dict(s) for s in self.size_sets]
        looped = ", looped_reductions=True" if self.looped else ""
        call = (f"fl.explore(f, *inputs({sizes[0]}), dynamic={self.dynamic}{looped})" if runner == "explore"
                else f"torch.compile(f, backend='fusionlab'{', dynamic=True' if self.dynamic else ''})")
        lines = [f"# fuzz program {self.seed} ({runner}); features: {', '.join(self.features)}"]
        lines += [f"# {line}" for line in headline.splitlines()[:6]]
        lines += ["import torch", "import torch.nn.functional as F", "", "import fusionlab as fl"]
        if self.looped and runner == "explore":  # the oracle's 2-element loop steps (run from the repository's root)
            lines += ["from tests.fuzz.oracle import _short_loops", "", "_short_loops(True).__enter__()"]
        lines += ["", "", self.source(), "", "def inputs(sizes):"]
        lines += [f"    {line}" for line in _symbolic_input_lines(self)]
        lines += [f"    return [{', '.join(s.name for s in self.inputs)}]", "", "",
                  "TOL = {torch.float16: (1e-2, 1e-2), torch.bfloat16: (5e-2, 2e-2), torch.float32: (1e-4, 1e-4),",
                  "       torch.float64: (1e-7, 1e-7)}", f"run = {call}",
                  f"for sizes in {sizes[1:] + sizes[:1] if runner == 'explore' else sizes}:",
                  "    want_in, got_in = inputs(sizes), inputs(sizes)",
                  "    want, got = f(*want_in), run(*got_in)",
                  "    pairs = [*zip(['output'] * len(want), want, got), *zip(['input'] * 9, want_in, got_in)]",
                  "    for name, w, g in pairs:",
                  "        atol, rtol = TOL.get(w.dtype, (0, 0))",
                  "        torch.testing.assert_close(g, w, atol=atol, rtol=rtol, equal_nan=True,",
                  "                                   msg=lambda m, name=name: f'{name}: {m}')",
                  "print('fusionlab matches eager')"]
        return "\n".join(lines) + "\n"


def _symbolic_input_lines(program: Program) -> list[str]:
    """The input recipes with sizes read from a `sizes` dict (so one function makes both call sizes)."""
    names = sorted({s for spec in program.inputs for s in (*spec.shape, spec.high) if isinstance(s, str)})
    placeholder = {name: 1000 + i for i, name in enumerate(names)}
    lines = []
    for spec in program.inputs:
        text = spec.recipe(placeholder)
        for name, value in placeholder.items():
            text = text.replace(str(value), f"sizes[{name!r}]")
        lines += [f"g = torch.Generator().manual_seed({program.generator_seed(spec)})", f"{spec.name} = {text}"]
    return lines


def _mentions(text: str, name: str) -> bool:
    import re

    return re.search(rf"\b{re.escape(name)}\b", text) is not None
