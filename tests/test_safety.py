"""Safe source: names from user code become valid, unique identifiers, and no user text reaches the code unescaped.

User text reaches generated source only as identifiers (through `names.Namer`), as one-line comments (through
`names.comment`) or as Python literals (`repr`). These tests feed hostile names (keywords, builtins, names the
generated code itself uses, dashes, unicode, quotes, newlines, code) and check that the source still compiles,
runs correctly, and holds the raw text nowhere outside comments and string literals.
"""

from __future__ import annotations

import ast
import io
import keyword
import tokenize

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import fusionlab as fl
from fusionlab.names import Namer, comment, sanitize

HOSTILE = ["x');import os;('", "line\nbreak", "a b", "a-b", "a_b", "ünïcode", "class", "tl", "__import__",
           "1st", "", "\x00null", "# comment", "lambda"]


def code_tokens(source: str) -> list[str]:
    """The source's tokens other than comments and string literals."""
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return [t.string for t in tokens if t.type not in (tokenize.COMMENT, tokenize.STRING, tokenize.NL,
                                                         tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT)]


def assert_safe(ex: fl.Exploration, raw_names: list[str]) -> None:
    generated = ex.generated
    sources = [generated.wrapper] + [generated.kernel_module(k) for k in generated.kernels]
    for source in sources:
        ast.parse(source)  # compiles
        code = " ".join(code_tokens(source))
        for raw in raw_names:
            if raw and not raw.isidentifier():
                assert raw not in code, f"user text {raw!r} appears in code:\n{source}"
        for line in source.splitlines():
            if "#" in line:
                assert "\n" not in line and "\x00" not in line
    # Identifiers the program binds are valid and not keywords.
    for node in ast.walk(ast.parse(generated.wrapper)):
        if isinstance(node, ast.arg):
            assert node.arg.isidentifier() and not keyword.iskeyword(node.arg)


@pytest.mark.parametrize("raw", HOSTILE)
def test_sanitize_gives_identifiers(raw: str) -> None:
    name = sanitize(raw)
    assert name.isidentifier() and not keyword.iskeyword(name)
    assert name not in ("tl", "triton", "torch", "libdevice", "math") and not name.startswith("_")
    assert "\n" not in comment(raw) and "\x00" not in comment(raw)


def test_namer_makes_unique_names() -> None:
    namer = Namer({"empty"})
    names = [namer.identifier(raw, key=f"k{i}") for i, raw in enumerate(["a-b", "a_b", "a b", "empty", "a-b"])]
    assert len(set(names)) == len(names)
    assert "empty" not in names
    assert namer.identifier("a-b", key="k0") == names[0]  # the same key gives the same name


class OddlyNamed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleDict({"layer-1": nn.Linear(8, 8), "ünïcode": nn.LayerNorm(8), "class": nn.Linear(8, 8)})
        self.params = nn.ParameterDict({
            "a b": nn.Parameter(torch.randn(8)), "x');import os;('": nn.Parameter(torch.randn(8)),
            "a-b": nn.Parameter(torch.randn(8)), "a_b": nn.Parameter(torch.randn(8)),
            "__import__": nn.Parameter(torch.randn(8)), "1st": nn.Parameter(torch.randn(8)),
        })
        self.register_buffer("tl", torch.rand(8) + 0.5)
        self.register_parameter("line\nbreak", nn.Parameter(torch.randn(8)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.blocks["ünïcode"](self.blocks["layer-1"](x)) + self.blocks["class"](x)
        for parameter in self.params.values():
            y = y * parameter
        return torch.tanh(y * self.tl + getattr(self, "line\nbreak"))


@pytest.mark.parametrize("policy", ["none", "default"])
def test_module_with_odd_names(policy: str) -> None:
    module = OddlyNamed().eval()
    ex = fl.explore(module, torch.randn(4, 8), policy=policy)
    names = [spec.name for spec in ex.captured.inputs]
    assert "params.x');import os;('" in names and "line\nbreak" in names  # shown as the user wrote them
    graph_names = ex.decomposed.graph.inputs
    assert len(set(graph_names)) == len(graph_names) and all(n.isidentifier() for n in graph_names)
    assert_safe(ex, names + ["x');import os;('", "line\nbreak", "ünïcode", "layer-1"])
    fresh = torch.randn(4, 8)
    with torch.no_grad():
        torch.testing.assert_close(ex(fresh), module(fresh))
    assert ex.verify().ok


def test_arguments_named_like_the_generated_code() -> None:
    """Argument names that the wrapper and kernels use themselves (tl, empty, launch, device, torch, xindex,
    XBLOCK, mask, in_x, ...) and Python's own (lambda_ is a user's way around `lambda`)."""

    def fn(tl, empty, launch, device, torch_, xindex, XBLOCK, mask, in_x, lambda_,  # noqa: N803
           fusionlab_program, pointwise_0_add):
        return ((tl + empty) * launch - device + torch_ * xindex + XBLOCK * mask + in_x * lambda_
                + fusionlab_program * pointwise_0_add).softmax(-1)

    inputs = [torch.randn(4, 8) for _ in range(12)]
    for policy in ("none", "default"):
        ex = fl.explore(fn, *inputs, policy=policy)
        params = [a.arg for a in ast.parse(ex.generated.wrapper).body[0].args.args]  # type: ignore[attr-defined]
        assert len(set(params)) == 12
        assert "tl" not in params and "lambda_" in params
        fresh = [torch.randn(4, 8) for _ in range(12)]
        torch.testing.assert_close(ex(*fresh), fn(*fresh))


def test_keyword_argument_names_and_string_values() -> None:
    """A keyword argument and a string option reach the source as an identifier and a literal."""

    def fn(x, *, lambda_: torch.Tensor, side: str = "right") -> torch.Tensor:
        edges = torch.linspace(-1, 1, 5)
        return torch.searchsorted(edges, x * lambda_, side=side).float() + F.silu(x)

    x, scale = torch.randn(4, 8), torch.randn(4, 8)
    ex = fl.explore(fn, x, lambda_=scale, side="right")
    tree = ast.parse(ex.generated.wrapper)
    literals = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)}
    assert "right" in literals
    torch.testing.assert_close(ex(x, lambda_=scale, side="right"), fn(x, lambda_=scale, side="right"))


def test_comments_cannot_break_lines() -> None:
    """Group and op names appear in comments: they are single lines whatever the user wrote."""
    module = OddlyNamed().eval()
    ex = fl.explore(module, torch.randn(4, 8))
    for line in ex.generated.as_text().splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            continue
        assert "import os" not in stripped.split("#")[0], line
