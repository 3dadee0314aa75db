"""Running generated kernels under Triton's interpreter, chosen per kernel at run time.

Triton decides JIT vs interpreter when a function is decorated, and its standard library (`tl.sum`, `tl.max`,
...) was decorated when triton was imported. `interpreted()` builds a kernel with the interpreter switched on and,
while it runs, swaps the standard library's JIT functions for interpreted ones; `libdevice` is replaced by numpy
equivalents (Triton's interpreter has none). CPU and CUDA kernels can so coexist in one process.
"""

from __future__ import annotations

import contextlib
import dataclasses
import linecache
import os
import types
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import triton
import triton.language as tl
import triton.language.core as tl_core
import triton.language.math as tl_math
import triton.language.standard as tl_standard
import triton.runtime.interpreter as triton_interpreter
from triton.runtime.interpreter import InterpretedFunction, TensorHandle
from triton.runtime.jit import JITFunction

try:  # imported lazily by triton at launch time; import it now, while the interpreter is off
    import triton.experimental.gluon  # noqa: F401
except ImportError:  # pragma: no cover - older triton
    pass


def _wrap(result: np.ndarray, like: Any) -> Any:
    scalar = like.handle.dtype.scalar if hasattr(like.handle.dtype, "scalar") else like.handle.dtype
    return tl.tensor(TensorHandle(result.astype(like.handle.data.dtype, copy=False), scalar), like.type)


def _unary(function: Callable[[np.ndarray], np.ndarray]) -> Callable[[Any], Any]:
    def apply(x: Any) -> Any:
        with np.errstate(all="ignore"):
            return _wrap(function(x.handle.data), x)
    return apply


def _binary(function: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Callable[[Any, Any], Any]:
    def apply(x: Any, y: Any) -> Any:
        x, y = (v if isinstance(v, tl.tensor) else tl.full((), v, tl.float32) for v in (x, y))
        with np.errstate(all="ignore"):
            result = function(x.handle.data, y.handle.data)
        # The result has the block type of whichever operand is a block (a literal operand is a scalar), in the
        # shape the two broadcast to (a [1, 1] constant and a [XBLOCK, 1] row, or a row and a column)
        like = y if y.type.is_block() and not x.type.is_block() else x
        result = np.asarray(result)
        kind = like.type
        if kind.is_block() and tuple(result.shape) != tuple(kind.shape):
            kind = tl.block_type(kind.element_ty, list(result.shape))
        return tl.tensor(TensorHandle(result.astype(like.handle.data.dtype, copy=False),
                                      like.handle.dtype.scalar if hasattr(like.handle.dtype, "scalar")
                                      else like.handle.dtype), kind)
    return apply


def _isinf(x: Any) -> Any:
    data = np.isinf(x.handle.data)
    return tl.tensor(TensorHandle(data, tl.int1), x.type.with_element_ty(tl.int1) if hasattr(
        x.type, "with_element_ty") else tl.int1)


def _erfinv(values: np.ndarray) -> np.ndarray:
    import torch

    return torch.special.erfinv(torch.from_numpy(np.ascontiguousarray(values))).numpy()


LIBDEVICE_SHIM = types.SimpleNamespace(
    tanh=_unary(np.tanh), expm1=_unary(np.expm1), log1p=_unary(np.log1p), log10=_unary(np.log10),
    tan=_unary(np.tan), asin=_unary(np.arcsin), acos=_unary(np.arccos), atan=_unary(np.arctan),
    sinh=_unary(np.sinh), cosh=_unary(np.cosh), asinh=_unary(np.arcsinh), acosh=_unary(np.arccosh),
    atanh=_unary(np.arctanh), nearbyint=_unary(np.rint), trunc=_unary(np.trunc), erfinv=_unary(_erfinv),
    pow=_binary(np.power), atan2=_binary(np.arctan2), fmod=_binary(np.fmod), isinf=_isinf,
)


@contextlib.contextmanager
def _interpret_switch(on: bool) -> Iterator[None]:
    previous = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1" if on else "0"
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = previous


@contextlib.contextmanager
def interpreted_standard_library() -> Iterator[None]:
    """While an interpreted kernel runs, Triton's own @jit helpers must be interpreted too."""
    swaps = _standard_library_swaps()
    for module, name, _, interpreted in swaps:
        setattr(module, name, interpreted)
    try:
        with _language_patches_undone(), _bfloat16_dot(), _boolean_splat(), _assertions_on():
            yield
    finally:
        for module, name, original, _ in swaps:
            setattr(module, name, original)


@contextlib.contextmanager
def _assertions_on() -> Iterator[None]:
    """`tl.device_assert` raises under the interpreter (an index out of range, codegen/kernel.py `_gather`), as
    eager raises an IndexError. Triton's interpreter drops assertions unless its options say `debug` (3.6 to 3.9);
    its integer-overflow checks, which `debug` would also switch on, stay off: integer ops wrap, as in PyTorch."""
    builder = getattr(triton_interpreter, "interpreter_builder", None)
    options = getattr(builder, "options", None)
    if options is None or not dataclasses.is_dataclass(options) or not hasattr(options, "debug"):
        yield  # pragma: no cover - a Triton without this internal: assertions stay off
        return
    changes = {"debug": True} | ({"sanitize_overflow": False} if hasattr(options, "sanitize_overflow") else {})
    builder.options = dataclasses.replace(options, **changes)  # type: ignore[union-attr, type-var]
    try:
        yield
    finally:
        builder.options = options  # type: ignore[union-attr]


@contextlib.contextmanager
def _bfloat16_dot() -> Iterator[None]:
    """Triton's interpreter keeps bfloat16 values as their uint16 bits and its `tl.dot` multiplies those bits
    (Triton 3.6 to 3.9): widen bfloat16 operands to float32 first, as the GPU's MMA does."""
    builder = getattr(triton_interpreter, "InterpreterBuilder", None)
    if builder is None:  # pragma: no cover - a Triton without this internal
        yield
        return
    original = builder.create_dot

    def widen(handle: Any) -> Any:
        if handle.dtype.scalar == tl.bfloat16 if hasattr(handle.dtype, "scalar") else handle.dtype == tl.bfloat16:
            # bfloat16 is the top half of a float32: shifting is exact (Triton's _convert_float loses subnormals).
            data = (handle.data.astype(np.uint32) << 16).view(np.float32)
            return TensorHandle(data, tl.float32)
        return handle

    def create_dot(self: Any, a: Any, b: Any, *rest: Any, **options: Any) -> Any:
        return original(self, widen(a), widen(b), *rest, **options)

    builder.create_dot = create_dot
    try:
        yield
    finally:
        builder.create_dot = original


@contextlib.contextmanager
def _boolean_splat() -> Iterator[None]:
    """Triton's interpreter gives a comparison's result the operands' dtype with boolean data, and splatting a
    scalar fills a block of that dtype (Triton 3.9): `mask & (0 >= pad)` (a padding's range check at a constant
    index) became an int32 mask, which `tl.load` refuses ("mask has unsupported dtype"). Boolean data stays
    boolean when it is splat, as the GPU's int1 does."""
    builder = getattr(triton_interpreter, "InterpreterBuilder", None)
    if builder is None:  # pragma: no cover - a Triton without this internal
        yield
        return
    original = builder.create_splat

    def create_splat(self: Any, block_type: Any, argument: Any) -> Any:
        result = original(self, block_type, argument)
        if np.asarray(argument.data).dtype == np.bool_ and result.data.dtype != np.bool_:
            return TensorHandle(result.data.astype(np.bool_), tl.int1)
        return result

    builder.create_splat = create_splat
    try:
        yield
    finally:
        builder.create_splat = original


def _squeezed_index(self: Any) -> int:
    return int(np.asarray(self.handle.data).squeeze())


@contextlib.contextmanager
def _language_patches_undone() -> Iterator[None]:
    """Put triton.language back as it was once the interpreted kernel is done.

    Triton's interpreter patches the language's builtins for interpreted code, and for a device-function call
    (the standard library, `tl.reduce`'s combine functions) it never undoes them (Triton 3.6 to 3.9): a CUDA
    compile later in the same process then meets interpreter builtins ("'value' object has no attribute
    'dtype'"). Each patch is recorded, and the state before the first one restored. Also, Triton < 3.9 turns a
    size argument into a 1-element array and indexes it with `int(array)`, which NumPy 2 refuses
    (`range(0, rnumel, RBLOCK)`): squeeze it first, as Triton 3.9 does."""
    patch = getattr(triton_interpreter, "_patch_lang", None)
    if patch is None:  # pragma: no cover - a Triton without this internal: nothing to undo
        yield
        return
    before: dict[tuple[int, str], tuple[Any, str, Any]] = {}

    def recording(fn: Any) -> Any:
        scope = patch(fn)
        if hasattr(scope, "set_attr"):
            scope.set_attr(tl.tensor, "__index__", _squeezed_index)
        for obj, name, value in list(getattr(scope, "_changes", ())):
            before.setdefault((id(obj), name), (obj, name, value))
        return scope

    triton_interpreter._patch_lang = recording  # type: ignore[attr-defined]
    try:
        yield
    finally:
        triton_interpreter._patch_lang = patch  # type: ignore[attr-defined]
        missing = getattr(triton_interpreter, "_MISSING", None)
        for obj, name, value in before.values():
            inherited = isinstance(obj, type) and any(vars(base).get(name) is value for base in obj.__mro__[1:])
            if (value is missing and missing is not None) or inherited:
                if name in vars(obj):
                    delattr(obj, name)  # it was not the object's own attribute (tensor.__repr__ is object's)
            else:
                setattr(obj, name, value)


_SWAPS: list[tuple[Any, str, Any, Any]] = []


def _standard_library_swaps() -> list[tuple[Any, str, Any, Any]]:
    """(module, name, JIT function, its interpreted twin), built once: wrapping them costs milliseconds."""
    if not _SWAPS:
        for module in (tl, tl_standard, tl_math, tl_core):
            for name, value in list(vars(module).items()):
                if isinstance(value, JITFunction):
                    _SWAPS.append((module, name, value, InterpretedFunction(value.fn)))
    return _SWAPS


def build_module(source: str, filename: str, interpret: bool) -> dict[str, Any]:
    """Execute kernel source with the interpreter switched on or off; returns the module namespace."""
    namespace: dict[str, Any] = {"__name__": f"fusionlab_kernels_{filename}"}
    if interpret:
        namespace["libdevice"] = LIBDEVICE_SHIM
    else:
        from triton.language.extra import libdevice

        namespace["libdevice"] = libdevice
    path = f"<fusionlab-{filename}-{'interpreter' if interpret else 'jit'}>"
    # Triton reads a kernel's source back through inspect/linecache: register it under its own name.
    linecache.cache[path] = (len(source), None, source.splitlines(True), path)
    code = compile(source, path, "exec")
    with _interpret_switch(interpret):
        exec(code, namespace)  # noqa: S102 - our own generated source
    return namespace


__all__ = ["build_module", "interpreted_standard_library", "LIBDEVICE_SHIM", "triton"]
