"""What capture must keep of the user's code: writes through views and to inputs and buffers, module modes,
closures over modules, size guards under dynamic=True, gradients, and clear refusals where it cannot."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import torch

import fusionlab as fl
from fusionlab.capture import CaptureError, GuardFailed, StateChanged


def _same(fn: Callable[..., Any], *inputs: torch.Tensor, call: tuple[torch.Tensor, ...] | None = None,
          **options: Any) -> None:
    """Fused and eager on separate copies: equal outputs and equal inputs after the call."""
    ex = fl.explore(fn, *[t.clone() for t in inputs], **options)
    args = call if call is not None else tuple(torch.randn_like(t) if t.is_floating_point() else t for t in inputs)
    eager_args = [a.clone() for a in args]
    fused_args = [a.clone() for a in args]
    want, got = fn(*eager_args), ex(*fused_args)
    torch.testing.assert_close(got, want)
    for index, (a, b) in enumerate(zip(eager_args, fused_args)):
        torch.testing.assert_close(b, a, msg=lambda m, i=index: f"input {i} after the call: {m}")


def _write_column(a: torch.Tensor) -> torch.Tensor:
    y = a.clone()
    y[:, 0] = 0
    return y


def _write_strided(a: torch.Tensor) -> torch.Tensor:
    p = torch.zeros(*a.shape[:-1], 2 * a.shape[-1])
    p[..., 0::2] = torch.sin(a)
    p[..., 1::2] = torch.cos(a)
    return p


def _fill_diagonal(a: torch.Tensor) -> torch.Tensor:
    y = a.clone()
    y.diagonal().fill_(1)
    return y


def _scale_last(a: torch.Tensor) -> torch.Tensor:
    y = a * 1
    y[..., 0] *= 3
    return y


@pytest.mark.parametrize("fn,shape", [(fn, shape) for fn in (_write_column, _write_strided, _fill_diagonal, _scale_last)
                                      for shape in ((5, 5), (4, 6), (3, 3, 3))
                                      if not (fn is _fill_diagonal and len(shape) != 2)])
def test_writes_through_views_are_kept(fn: Callable[..., Any], shape: tuple[int, ...]) -> None:
    _same(fn, torch.randn(shape))


def _zero_first_row(a: torch.Tensor) -> torch.Tensor:
    a[0] = 0
    return a.sum()


def _relu_in_place(a: torch.Tensor) -> torch.Tensor:
    a.relu_()
    return a * 2


def _copy_into(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    a.copy_(b)
    return a + 1


def _add_into_second(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    b.add_(a)
    return a - 1


@pytest.mark.parametrize("fn,count", [(_zero_first_row, 1), (_relu_in_place, 1), (_copy_into, 2),
                                      (_add_into_second, 2)])
def test_writes_to_inputs_reach_the_caller(fn: Callable[..., Any], count: int) -> None:
    inputs = [torch.randn(4, 6) for _ in range(count)]
    _same(fn, *inputs)
    ex = fl.explore(fn, *[t.clone() for t in inputs])
    assert ex.captured.result.mutations, "the capture records which inputs the function writes"


def test_batch_norm_statistics_in_train_mode() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.BatchNorm1d(5)).train()
    reference = copy.deepcopy(model)
    ex = fl.explore(model, torch.randn(8, 6))
    for _ in range(2):
        x = torch.randn(8, 6)
        with torch.no_grad():
            torch.testing.assert_close(ex(x), reference(x))
    torch.testing.assert_close(model[1].running_mean, reference[1].running_mean)
    torch.testing.assert_close(model[1].running_var, reference[1].running_var)
    assert int(model[1].num_batches_tracked) == int(reference[1].num_batches_tracked) == 2


def test_a_mode_change_after_capture_is_refused() -> None:
    bn = torch.nn.BatchNorm1d(6).eval()
    ex = fl.explore(bn, torch.randn(4, 6))
    ex(torch.randn(4, 6))
    bn.train()
    with pytest.raises(StateChanged, match=r"training was False .* is True now"):
        ex(torch.randn(4, 6))
    bn.eval()
    ex(torch.randn(4, 6))  # back as captured: runs again


def test_a_lambda_closing_over_a_module() -> None:
    block = torch.nn.TransformerEncoderLayer(8, 2, 16, batch_first=True).eval()
    h = torch.randn(2, 3, 8)
    ex = fl.explore(lambda h: block(h)[0], h)
    with torch.no_grad():
        torch.testing.assert_close(ex(h), block(h)[0], atol=1e-5, rtol=1e-5)
        block.linear1.weight.mul_(2)  # parameters are read on every call, not frozen at capture
        torch.testing.assert_close(ex(h), block(h)[0], atol=1e-5, rtol=1e-5)


def test_a_closure_tensor_is_an_input() -> None:
    weight = torch.randn(6)
    ex = fl.explore(lambda a: a * weight, torch.randn(4, 6))
    x = torch.randn(4, 6)
    torch.testing.assert_close(ex(x), x * weight)


def _branch(a: torch.Tensor) -> torch.Tensor:
    return a * 2 if a.shape[0] > 4 else a * 3


def _clamped(a: torch.Tensor) -> torch.Tensor:
    return a[: min(a.shape[0], 5)]


def _equal(a: torch.Tensor) -> torch.Tensor:
    return a * 2 if a.shape[0] == 4 else a


@pytest.mark.parametrize("fn,condition", [(_branch, r"a\.shape\[0\] <= 4"), (_clamped, r"a\.shape\[0\] <= 5"),
                                          (_equal, r"a\.shape\[0\] == 4")])
def test_dynamic_guards_are_checked(fn: Callable[..., Any], condition: str) -> None:
    ex = fl.explore(fn, torch.randn(4, 6), dynamic=True)
    x = torch.randn(4, 6)
    torch.testing.assert_close(ex(x), fn(x))
    with pytest.raises(GuardFailed, match=condition):
        ex(torch.randn(8, 6))


@pytest.mark.parametrize("fn", [lambda a: a + torch.arange(a.shape[0])[:, None],
                                lambda a: a + torch.zeros(a.shape[0], 6),
                                lambda a: a.sum(0) / a.shape[0],
                                lambda a: a.reshape(a.shape[0] * 2, 3) * a.shape[0]])
def test_sizes_used_as_values(fn: Callable[..., Any]) -> None:
    ex = fl.explore(fn, torch.randn(4, 6), dynamic=True)
    for rows in (4, 7):
        x = torch.randn(rows, 6)
        torch.testing.assert_close(ex(x), fn(x))


def test_data_dependent_code_is_refused_clearly() -> None:
    with pytest.raises(CaptureError, match=r"depends on the values inside a tensor .*backend='fusionlab'"):
        fl.explore(lambda a: a * 2 if a.sum() > 0 else a, torch.randn(4, 6)).captured  # noqa: B018


def test_sparse_input_is_refused_clearly() -> None:
    with pytest.raises(CaptureError, match=r"sparse_coo.*to_dense"):
        fl.explore(lambda a: a * 2, torch.randn(4, 6).to_sparse()).captured  # noqa: B018


def test_keyword_named_like_an_option() -> None:
    def scaled(a: torch.Tensor, policy: float = 1.0) -> torch.Tensor:
        return a * policy

    with pytest.raises(TypeError, match=r"ambiguous.*kwargs="):
        fl.explore(scaled, torch.randn(4), policy=2.0)
    ex = fl.explore(scaled, torch.randn(4), kwargs={"policy": 2.0})
    x = torch.randn(4)
    torch.testing.assert_close(ex(x, policy=2.0), x * 2)
    assert fl.explore(scaled, torch.randn(4), kwargs={}, policy="none").fused.policy_name == "none"


def test_inputs_that_require_grad_keep_their_graph() -> None:
    w = torch.randn(4, 6, requires_grad=True)
    ex = fl.explore(lambda a: (a * 2).sin(), w.detach())
    out = ex(w)
    assert out.requires_grad
    out.sum().backward()
    torch.testing.assert_close(w.grad, 2 * torch.cos(2 * w.detach()))


def test_module_gradients_match_eager() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.BatchNorm1d(5), torch.nn.GELU()).train()
    reference = copy.deepcopy(model)
    x = torch.randn(8, 6)
    ex = fl.explore(model, x)
    ex(x).square().sum().backward()
    reference(x).square().sum().backward()
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-4, rtol=1e-4, msg=lambda m, n=name: f"{n}: {m}")
    torch.testing.assert_close(model[1].running_mean, reference[1].running_mean)


def test_a_nan_scalar_is_the_same_scalar() -> None:
    ex = fl.explore(lambda a, s: a * s, torch.randn(4), float("nan"))
    assert torch.isnan(ex(torch.randn(4), float("nan"))).all()
    with pytest.raises(ValueError, match="specialised"):
        ex(torch.randn(4), 1.0)


def test_the_same_tensor_passed_twice_is_two_inputs() -> None:
    """`explore(h, x, x)`: a later call with two different tensors computes both, as eager does."""
    def h(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a * 2 + b.sin()

    x = torch.randn(4, 4)
    ex = fl.explore(h, x, x)
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    torch.testing.assert_close(ex(a, b), h(a, b))
    torch.testing.assert_close(ex(x, x), h(x, x))


def test_aliased_inputs_of_a_function_that_writes_in_place_are_refused() -> None:
    def g(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a.add_(1)
        return a * b

    ex = fl.explore(g, torch.randn(4), torch.randn(4))
    y = torch.randn(4)
    with pytest.raises(fl.InputMismatch, match=r"'a' and 'b' share memory.*writes to 'a' in place.*b.clone\(\)"):
        ex(y, y)
    with pytest.raises(fl.InputMismatch, match="share memory"):
        ex(y, y[0].expand(4))  # a view of the same storage
    a, b = torch.randn(4), torch.randn(4)
    expected_a = a + 1
    torch.testing.assert_close(ex(a, b), expected_a * b)
    torch.testing.assert_close(a, expected_a)



def test_inputs_that_share_memory_but_are_not_written_or_do_not_overlap_are_fine() -> None:
    def g(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        a.add_(1)
        return a * b + c

    ex = fl.explore(g, torch.randn(4), torch.randn(4), torch.randn(4))
    y = torch.randn(4)
    a = torch.randn(4)
    torch.testing.assert_close(ex(a.clone(), y, y), g(a.clone(), y, y))  # b and c alias: only read
    rows, expected = torch.randn(3, 4), None
    expected_rows = rows.clone()
    expected = g(expected_rows[0], expected_rows[1], expected_rows[2])
    torch.testing.assert_close(ex(rows[0], rows[1], rows[2]), expected)  # one storage, no overlap
    torch.testing.assert_close(rows, expected_rows)


def test_outputs_that_cannot_be_rebuilt_are_refused() -> None:
    class Slotted:
        __slots__ = ("t",)

        def __init__(self, t: torch.Tensor) -> None:
            self.t = t

    with pytest.raises(CaptureError, match="output 0 is a Slotted.*no __dict__"):
        fl.explore(lambda x: Slotted(x * 2), torch.randn(4)).captured  # noqa: B018
    with pytest.raises(CaptureError, match="output 1 is a size .* return it as a tensor"):
        fl.explore(lambda x: (x * 2, x.shape[0]), torch.randn(4, 3), dynamic=True).captured  # noqa: B018
