"""Run a program through fusionlab and through eager PyTorch, and say how it ended.

    >>> result = run(generate(7), "explore")
    >>> result.outcome in ("pass", "refused", "wrong", "crashed")
    True

Outcomes:
- pass: every output and every input after the call equal eager's (per-dtype tolerance of fusionlab.compare, or
  of the loosest floating dtype the program computes with where that is looser: eager rounds every intermediate
  to it, a fused kernel keeps float32; exact for bool and integer tensors; NaN where eager has NaN) at
  every call size;
- refused: fusionlab raised a clear refusal (see `is_clear_refusal`);
- wrong: fusionlab returned, and a number, shape, dtype or an input written in place differs from eager;
- crashed: any other exception (torch internals, IndexError, AttributeError, a vague "could not trace" wrapper).
"""

from __future__ import annotations

import contextlib
import linecache
import re
import traceback
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

import fusionlab as fl
from fusionlab.compare import LOOSEST_FIRST, computed_through, tolerance
from fusionlab.runtime import config as launch_config
from tests.fuzz.program import Program

OUTCOMES = ("pass", "refused", "wrong", "crashed")
CLEAR_BASES = (ValueError, TypeError, NotImplementedError)
# fusionlab's fallback when a trace fails for a reason it does not recognise: it names torch's exception, not what
# the user should do, so it counts as an unclear error (a crash), not a refusal.
GENERIC_WRAP = re.compile(r"could not trace \S+( at [^:]+:\d+[^:]*)?: (\w+): ")


@dataclass(frozen=True)
class Result:
    runner: str
    outcome: str
    detail: str = ""
    signature: str = ""  # what makes two failures the same failure (exception type and place, or output kind)


def causes(error: BaseException) -> Iterator[BaseException]:
    """The exception and what it wraps (`__cause__`, Dynamo's `inner_exception`), outermost first."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = getattr(current, "inner_exception", None) or current.__cause__


def is_clear_refusal(error: BaseException) -> bool:
    """A refusal is acceptable when fusionlab itself says no, in words:
    - an exception whose class is defined in a fusionlab module and derives from ValueError, TypeError or
      NotImplementedError (CaptureError, InputMismatch, GuardFailed, FusionError, ...), except the generic
      "could not trace f: SomeTorchError: ..." wrapper; or
    - a plain ValueError/TypeError/NotImplementedError raised by a `raise` statement in fusionlab's own code
      (not a Python error from a bug there, such as `None + 1`)."""
    for cause in causes(error):
        if not isinstance(cause, CLEAR_BASES):
            continue
        if type(cause).__module__.startswith("fusionlab"):
            return not GENERIC_WRAP.search(str(cause))
        frames = traceback.extract_tb(cause.__traceback__)
        if frames and "/fusionlab/" in frames[-1].filename.replace("\\", "/"):
            line = frames[-1].line or linecache.getline(frames[-1].filename, frames[-1].lineno or 0)
            if line.strip().startswith("raise"):
                return True
    return False


def signature_of(error: BaseException) -> str:
    """Exception type, its innermost frame in fusionlab or torch, and the message with numbers and names blurred."""
    innermost = list(causes(error))[-1]
    frames = traceback.extract_tb(innermost.__traceback__)
    place = ""
    for frame in reversed(frames):
        path = frame.filename.replace("\\", "/")
        if "/fusionlab/" in path or "/torch/" in path or "/triton/" in path:
            place = f"{path.split('/site-packages/')[-1].split('/main/')[-1]}:{frame.name}"
            break
    message = str(innermost).splitlines()[0] if str(innermost) else ""
    message = re.sub(r"\b(t\d+|s\d+|u\d+|[abci])\b", "X", message)
    message = re.sub(r"\d+", "#", message)[:120]
    return f"{type(innermost).__name__} @ {place}: {message}"


class _Dtypes(TorchDispatchMode):
    """The dtypes of every tensor an eager call's ops take and return."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[torch.dtype] = set()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        result = func(*args, **(kwargs or {}))
        self.seen.update(t.dtype for t in pytree.tree_leaves((args, kwargs, result)) if isinstance(t, torch.Tensor))
        return result

    @property
    def loosest(self) -> torch.dtype | None:
        return next((d for d in LOOSEST_FIRST if d in self.seen), None)


def compare(label: str, want: Sequence[Any], got: Sequence[Any],
            through: torch.dtype | None | Sequence[torch.dtype | None] = None) -> str:
    """"" when equal within tolerance (that of a floating dtype `through` the value is computed from, where looser:
    one per value, or one for all), else what differs."""
    if len(want) != len(got):
        return f"{label}: eager has {len(want)} tensors, fusionlab {len(got)}"
    for index, (w, g) in enumerate(zip(want, got)):
        if not isinstance(g, torch.Tensor):
            return f"{label} {index}: fusionlab returned {type(g).__name__}"
        if w.shape != g.shape or w.dtype != g.dtype:
            return f"{label} {index}: eager {w.dtype}{list(w.shape)}, fusionlab {g.dtype}{list(g.shape)}"
        if w.numel() == 0:
            continue
        a, b = w.detach().double(), g.detach().double()
        atol, rtol = tolerance(w.dtype, through[index] if isinstance(through, (list, tuple)) else through)
        both_nan = a.isnan() & b.isnan()
        close = (a == b) | both_nan | ((a - b).abs() <= atol + rtol * a.abs())
        if not bool(close.all()):
            bad = (~close).nonzero()[0].tolist()
            diff = (a - b).abs().nan_to_num(float("inf"))[~close].max()
            return (f"{label} {index} ({str(w.dtype).removeprefix('torch.')}{list(w.shape)}): {int((~close).sum())} of "
                    f"{w.numel()} differ, max abs error {float(diff):.4g}; at {bad} eager {a[tuple(bad)].item():.6g} "
                    f"fusionlab {b[tuple(bad)].item():.6g}")
    return ""


def _failed(runner: str, stage: str, error: BaseException) -> Result:
    if is_clear_refusal(error):
        cause = next(c for c in causes(error) if isinstance(c, CLEAR_BASES))
        return Result(runner, "refused", f"{stage}: {type(cause).__name__}: {str(cause).splitlines()[0][:300]}",
                      type(cause).__name__)
    detail = "".join(traceback.format_exception(error)[-12:])
    return Result(runner, "crashed", f"{stage}: {type(error).__name__}: {str(error)[:2000]}\n{detail}",
                  f"{stage}: {signature_of(error)}")


def run(program: Program, runner: str) -> Result:
    """`runner` is "explore" (fl.explore, then calls at every size), "compile" (torch.compile, backend
    "fusionlab") or "train" (the same, with the floating inputs requiring grad: a weighted sum of the floating
    outputs is backpropagated and each input's gradient compared with eager's)."""
    with warnings.catch_warnings(), _short_loops(program.looped and runner == "explore"):
        warnings.simplefilter("ignore")
        try:
            return _run(program, runner)
        finally:
            if runner in ("compile", "train"):
                torch._dynamo.reset()


@contextlib.contextmanager
def _short_loops(on: bool) -> Iterator[None]:
    """A looped program's loops take 2 elements a step under the interpreter (its own blocks hold a fuzz row whole,
    so each loop would run once and an error carried from one step to the next could not show)."""
    if not on:
        yield
        return
    chosen = launch_config._interpreter

    def short(shape: launch_config.KernelShape) -> launch_config.BlockConfig:
        config = chosen(shape)
        if shape.kind in ("reduction", "outer_reduction") and not shape.persistent:
            return launch_config.BlockConfig(config.XBLOCK, min(config.RBLOCK, 2), config.num_warps)
        return config

    launch_config._interpreter = short
    try:
        yield
    finally:
        launch_config._interpreter = chosen


def _run(program: Program, runner: str) -> Result:
    fn = program.function()
    sets = program.size_sets
    if runner == "explore":
        try:
            ex = fl.explore(fn, *program.make_inputs(sets[0]), dynamic=program.dynamic,
                            looped_reductions=program.looped)
            ex.captured  # noqa: B018 - the capture stage, on its own, for the error's stage
        except Exception as error:  # noqa: BLE001 - classified
            return _failed(runner, "capture", error)
        call: Any = ex
        per_output: list[torch.dtype | None] | None = computed_through(ex.captured.graph_module)
        order = sets[1:] + sets[:1]  # captured at one size, called first at another
    else:
        call = torch.compile(fn, backend="fusionlab", dynamic=True if program.dynamic else None)
        per_output = None  # (several graphs: the loosest dtype of the whole call)
        order = sets
    for number, sizes in enumerate(order):
        want_inputs, got_inputs = program.make_inputs(sizes), program.make_inputs(sizes)
        if runner == "train":
            for x in (*want_inputs, *got_inputs):
                x.requires_grad_(x.is_floating_point())
        with _Dtypes() as dtypes:
            want = fn(*want_inputs)
        stage = "first call" if number == 0 else f"call {number + 1}"
        try:
            got = call(*got_inputs)
        except Exception as error:  # noqa: BLE001 - classified
            return _failed(runner, stage, error)
        if runner == "train":
            backpropagate(want, seed=number)
            try:
                backpropagate(got, seed=number)
            except Exception as error:  # noqa: BLE001 - classified
                return _failed(runner, f"backward of the {stage}", error)
        where = f" (call {number + 1}, sizes {sizes})" if len(sets) > 1 else ""
        got_leaves = pytree.tree_leaves(got) if isinstance(got, (tuple, list)) else [got]
        want_leaves = pytree.tree_leaves(want)
        through = per_output if per_output is not None and len(per_output) == len(want_leaves) else dtypes.loosest
        difference = compare("output", want_leaves, got_leaves, through) or compare(
            "input after the call", want_inputs, got_inputs, dtypes.loosest)
        if runner == "train" and not difference:
            difference = compare("gradient of input", *_gradients(want_inputs, got_inputs), dtypes.loosest)
        if difference:
            kind = next((k for k in ("input", "gradient") if difference.startswith(k)), "output")
            mismatch = "shape/dtype" if "fusionlab torch." in difference or "tensors" in difference else "values"
            return Result(runner, "wrong", difference + where, f"{kind} {mismatch}")
    return Result(runner, "pass")


def backpropagate(outputs: Any, seed: int) -> None:
    """Backpropagate a weighted sum of the floating outputs that require grad (weights drawn from `seed`: the same
    for eager and fusionlab, and not all ones, so each output's gradient counts on its own)."""
    leaves = [t for t in pytree.tree_leaves(outputs)
              if isinstance(t, torch.Tensor) and t.is_floating_point() and t.requires_grad]
    generator = torch.Generator().manual_seed(seed)
    terms = [(t.float() * (torch.rand(t.shape, generator=generator) + 0.5)).sum() for t in leaves]
    if terms:
        torch.stack(terms).sum().backward()


def _gradients(want: Sequence[torch.Tensor], got: Sequence[torch.Tensor]) -> tuple[list[Any], list[Any]]:
    """The inputs' gradients, eager's and fusionlab's (an input no output depends on has none in both: zeros)."""
    pairs = [(w, g) for w, g in zip(want, got) if w.requires_grad]
    return ([w.grad if w.grad is not None else torch.zeros_like(w) for w, _ in pairs],
            [g.grad if g.grad is not None else torch.zeros_like(g) for _, g in pairs])


def run_all(program: Program) -> list[Result]:
    return [run(program, runner) for runner in program.runners]
