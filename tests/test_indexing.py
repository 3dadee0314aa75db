"""Index-valued and constant tensors, indirect loads, one-hot scatter, padding, rolling and concatenation: each a
primitive that fuses into its consumer's kernel (not an extern op), checked against eager on fresh inputs."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import fusionlab as fl


def _explore(fn: Callable[..., Any], *inputs: torch.Tensor, **options: Any) -> Any:
    ex = fl.explore(fn, *inputs, **options)
    externs = [n.op for n in ex.decomposed.graph.nodes if n.kind == "extern"]
    assert not externs, f"extern ops: {externs}"
    return ex


def _kernels(ex: Any) -> int:
    return sum(1 for group in ex.fused.groups if group.is_kernel)


def _same(ex: Any, fn: Callable[..., Any], *inputs: torch.Tensor, exact: bool = True) -> None:
    got = ex(*inputs)
    want = fn(*inputs)
    got = got[0] if isinstance(got, tuple) and not isinstance(want, tuple) else got
    assert got.dtype == want.dtype and got.shape == want.shape
    if exact:
        assert torch.equal(got, want), (got, want)
    else:
        torch.testing.assert_close(got, want)


# -- constants and ranges ------------------------------------------------------------------------------------------
def test_position_ids_fuse_into_their_consumer() -> None:
    fn = lambda ids, w: w[ids] * 2 + torch.arange(ids.shape[-1])[:, None]  # noqa: E731
    ids, w = torch.randint(0, 10, (3, 5)), torch.randn(10, 4)
    ex = _explore(fn, ids, w)
    assert ex.verify().ok and _kernels(ex) == 1
    _same(ex, fn, torch.randint(0, 10, (3, 5)), torch.randn(10, 4))


def test_hf_position_plumbing_makes_no_kernel_of_its_own() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        b, t = x.shape[0], x.shape[1]
        positions = (torch.arange(t) + 0).unsqueeze(0).expand(b, t)
        return x + positions.unsqueeze(-1)
    x = torch.randn(2, 6, 3)
    ex = _explore(fn, x)
    assert _kernels(ex) == 1 and ex.verify().ok
    _same(ex, fn, torch.randn(2, 6, 3))


def test_an_arange_that_is_an_output_is_written_by_a_kernel() -> None:
    fn = lambda x: (torch.arange(2, 2 + x.shape[0], 3), torch.arange(0.5, x.shape[0], 0.25))  # noqa: E731
    ex = _explore(fn, torch.randn(7))
    assert ex.verify().ok and _kernels(ex) == 2
    for got, want in zip(ex(torch.randn(7)), fn(torch.randn(7))):
        assert got.dtype == want.dtype and torch.equal(got, want)
    assert "iota" in ex.decomposed.as_text()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.int64])
def test_constants(dtype: torch.dtype) -> None:
    def fn(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (torch.full((3, 4), 2.5, dtype=dtype), torch.full_like(x, 1000.3) - 1000 + x * 0,
                torch.full_like(x, 0.1) * 3, torch.zeros_like(x) + x, torch.ones_like(x) * x,
                x.new_ones(x.shape) + x, x.new_zeros((4,)), x.new_full((2, 4), 7), torch.ones(4, dtype=dtype) + x,
                torch.zeros(3, 4, dtype=dtype), torch.full_like(x, 3) - x)
    x = (torch.randn(3, 4) * 10).to(dtype)
    ex = _explore(fn, x)
    assert ex.verify().ok
    fresh = (torch.randn(3, 4) * 10).to(dtype)
    for got, want in zip(ex(fresh), fn(fresh)):
        assert got.dtype == want.dtype and torch.equal(got, want)


def test_arange_with_a_dynamic_size() -> None:
    fn = lambda x: x * torch.arange(x.shape[0])[:, None]  # noqa: E731
    ex = _explore(fn, torch.randn(5, 3), dynamic=True)
    assert ex.verify().ok and _kernels(ex) == 1
    _same(ex, fn, torch.randn(9, 3))
    assert " 5" not in ex.generated.kernels[0].source.split("\n", 1)[1]


# -- indirect loads ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_embedding(dtype: torch.dtype) -> None:
    fn = lambda ids, w: F.embedding(ids, w) * 2  # noqa: E731
    ids, w = torch.randint(0, 8, (2, 8)), torch.randn(8, 8).to(dtype)
    ex = _explore(fn, ids, w)
    assert ex.verify().ok and _kernels(ex) == 1
    _same(ex, fn, torch.randint(0, 8, (2, 8)), torch.randn(8, 8).to(dtype))


def test_embedding_with_int32_ids_and_equal_sizes() -> None:
    fn = lambda ids, w: F.embedding(ids, w)  # noqa: E731
    ids, w = torch.randint(0, 4, (4, 4), dtype=torch.int32), torch.randn(4, 4)
    ex = _explore(fn, ids, w)
    assert ex.verify().ok
    _same(ex, fn, torch.randint(0, 4, (4, 4), dtype=torch.int32), torch.randn(4, 4))


def test_index_wraps_negative_indices() -> None:
    fn = lambda x, i: x[i] + 1  # noqa: E731
    x, i = torch.randn(6, 3), torch.tensor([0, -1, 5, -6])
    ex = _explore(fn, x, i)
    assert ex.verify().ok and _kernels(ex) == 1
    _same(ex, fn, torch.randn(6, 3), torch.tensor([-2, -1, 3, 2]))


@pytest.mark.parametrize("fn", [
    lambda x, i, j: x[:, i],
    lambda x, i, j: x[:, :, i],
    lambda x, i, j: x[i, j],
    lambda x, i, j: x[:, i[:, None], j],
], ids=["dim1", "dim2", "two", "broadcast"])
def test_index_forms(fn: Callable[..., torch.Tensor]) -> None:
    def inputs() -> tuple[torch.Tensor, ...]:
        return torch.randn(5, 5, 5), torch.randint(-5, 5, (3,)), torch.randint(-5, 5, (3,))
    ex = _explore(fn, *inputs())
    assert ex.verify().ok and _kernels(ex) == 1
    _same(ex, fn, *inputs())


def test_index_on_dims_apart_is_refused_with_a_reason() -> None:
    ex = fl.explore(lambda x, i: x[i, :, i], torch.randn(4, 4, 4), torch.tensor([0, 1]))
    assert [n.op for n in ex.decomposed.graph.nodes if n.kind == "extern"] == ["aten.index.Tensor"]
    assert any("not adjacent" in reason for _, reason in ex.decomposed.result.fallbacks)
    assert ex.verify().ok


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_gather(dim: int) -> None:
    fn = lambda x, i: torch.gather(x, dim, i) * 3  # noqa: E731
    x, i = torch.randn(4, 4), torch.randint(0, 4, (4, 2) if dim else (2, 4))
    ex = _explore(fn, x, i)
    assert ex.verify().ok and _kernels(ex) == 1
    _same(ex, fn, torch.randn(4, 4), torch.randint(0, 4, i.shape))


def test_an_out_of_range_index_raises() -> None:
    fn = lambda ids, w: F.embedding(ids, w)  # noqa: E731
    ex = _explore(fn, torch.randint(0, 5, (4,)), torch.randn(5, 2))
    for bad in (torch.tensor([0, 1, 5, 2]), torch.tensor([0, -1, 2, 3])):  # embedding does not wrap negatives
        with pytest.raises(Exception, match="out of range"):
            ex(bad, torch.randn(5, 2))
    gathered = _explore(lambda x, i: torch.gather(x, 1, i), torch.randn(3, 4), torch.randint(0, 4, (3, 1)))
    with pytest.raises(Exception, match="out of range"):
        gathered(torch.randn(3, 4), torch.tensor([[0], [4], [1]]))


def test_the_table_is_kept_out_of_the_indexing_kernel() -> None:
    fn = lambda w, ids: (w * 2)[ids].sum(-1)  # noqa: E731
    # 9 rows gathered from 6: the gather reads more than the table holds, so the table is written by a kernel
    ex = _explore(fn, torch.randn(6, 4), torch.randint(0, 6, (9,)))
    assert _kernels(ex) == 2 and ex.verify().ok
    assert any("computed positions" in d.reason for d in ex.fused.decisions if not d.fused)
    _same(ex, fn, torch.randn(6, 4), torch.randint(0, 6, (9,)), exact=False)
    # 5 of 6: the gather moves ahead of `* 2` (decompose/gather.py), reads w, and the table is never written
    fewer = _explore(fn, torch.randn(6, 4), torch.randint(0, 6, (5,)))
    assert _kernels(fewer) == 1 and fewer.verify().ok
    _same(fewer, fn, torch.randn(6, 4), torch.randint(0, 6, (5,)), exact=False)


def test_embedding_with_dynamic_sizes() -> None:
    fn = lambda ids, w: F.embedding(ids, w) + torch.arange(ids.shape[1])[:, None]  # noqa: E731
    ex = _explore(fn, torch.randint(0, 7, (2, 5)), torch.randn(7, 3), dynamic=True)
    assert ex.verify().ok
    _same(ex, fn, torch.randint(0, 7, (4, 5)), torch.randn(7, 3))


# -- scatter, pad, roll --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_one_hot_scatter(dtype: torch.dtype) -> None:
    fn = lambda x, t: torch.zeros_like(x).scatter(1, t[:, None], -1.0) + x  # noqa: E731
    x, t = torch.randn(5, 5).to(dtype), torch.randint(0, 5, (5,))
    ex = _explore(fn, x, t)
    assert ex.verify().ok and _kernels(ex) == 1
    _same(ex, fn, torch.randn(5, 5).to(dtype), torch.randint(0, 5, (5,)))
    src = lambda x, t, s: x.scatter(0, t[None, :], s[None, :])  # noqa: E731
    ex = _explore(src, x, t, torch.randn(5).to(dtype))
    _same(ex, src, torch.randn(5, 5).to(dtype), torch.randint(0, 5, (5,)), torch.randn(5).to(dtype))
    with pytest.raises(Exception, match="out of range"):
        ex(x, torch.tensor([0, 1, 5, 2, 3]), torch.randn(5).to(dtype))


def test_other_scatters_are_externs_with_a_reason() -> None:
    ex = fl.explore(lambda x, i: x.scatter(1, i, 1.0), torch.randn(3, 4), torch.randint(0, 4, (3, 2)))
    assert any("one-hot" in reason for _, reason in ex.decomposed.result.fallbacks)
    assert ex.verify().ok


@pytest.mark.parametrize("pad", [(1, 2), (2, 0, 1, 1), (-1, 2), (0, 0, -1, -1)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_constant_pad(pad: tuple[int, ...], dtype: torch.dtype) -> None:
    fn = lambda x: F.pad(x * 2, pad, value=3) + 1  # noqa: E731
    x = (torch.randn(4, 5) * 10).to(dtype)
    ex = _explore(fn, x)
    assert ex.verify().ok and _kernels(ex) == 1
    _same(ex, fn, (torch.randn(4, 5) * 10).to(dtype))


def test_pad_feeding_a_reduction() -> None:
    fn = lambda x: F.pad(x, (1, 1), value=-2.0).softmax(-1)  # noqa: E731
    ex = _explore(fn, torch.randn(4, 6))
    assert ex.verify().ok and _kernels(ex) == 1


def test_cropped_value_read_at_a_size_one_index() -> None:
    """A negative padding (a crop: MobileNetV2's backward crops its 3x3 convolution gradients to 1x1) read in a looped
    reduction's last pass, where the 1x1 dimensions are the constant index 0: its range check is a scalar, and
    Triton's interpreter made `mask & (0 >= pad)` an int32 mask that `tl.load` refused. 5 channels: not a multiple
    of the block, so the row mask is computed too."""
    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        kept = torch.where(w > 0, F.pad(x, (-1, -1, -1, -1)), 0.0)
        return kept - kept.mean((0, 2, 3), keepdim=True) * w

    x, w = torch.randn(2, 5, 3, 3), torch.randn(2, 5, 1, 1)
    ex = _explore(fn, x, w, looped_reductions=True)
    assert _kernels(ex) == 1 and "(0 >= pad_" in ex.generated.kernels[0].source
    assert ex.verify().ok
    _same(ex, fn, torch.randn(2, 5, 3, 3), torch.randn(2, 5, 1, 1), exact=False)


@pytest.mark.parametrize("shifts, dims", [(1, 0), (-2, 1), ((1, 3), (0, 1)), (7, -1), ((1, 2), (0, 0)),
                                          ((1, -3, 2), (0, 1, -2))])
def test_roll(shifts: Any, dims: Any) -> None:
    fn = lambda x: torch.roll(x + 1, shifts, dims) * 2  # noqa: E731
    ex = _explore(fn, torch.randn(5, 5))
    assert ex.verify().ok and _kernels(ex) == 1
    _same(ex, fn, torch.randn(5, 5))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_arange_values_are_rounded_to_their_dtype(dtype: torch.dtype) -> None:
    """A bf16 arange is a bf16 tensor in eager (250..259 holds 256, 256, 258, 260, ...): the kernel rounds as well."""
    fn = lambda x: torch.arange(250, 260, dtype=dtype) - 250 + x * 0  # noqa: E731
    x = torch.randn(10).to(dtype)
    _same(_explore(fn, x), fn, x)


def test_roll_with_a_dynamic_size() -> None:
    fn = lambda x: torch.roll(x, 2, 0)  # noqa: E731
    ex = _explore(fn, torch.randn(5, 3), dynamic=True)
    _same(ex, fn, torch.randn(8, 3))


# -- cat -----------------------------------------------------------------------------------------------------------
def test_cat_drops_empty_inputs() -> None:
    fn = lambda cache, k: torch.cat([cache, k], dim=-2)  # noqa: E731
    ex = _explore(fn, torch.empty(2, 3, 0, 4), torch.randn(2, 3, 5, 4))
    assert ex.verify().ok and _kernels(ex) == 1
    mixed = _explore(fn, torch.empty(2, 3, 0, 4, dtype=torch.float64), torch.randn(2, 3, 5, 4))
    empty, k = torch.empty(2, 3, 0, 4, dtype=torch.float64), torch.randn(2, 3, 5, 4)
    got = mixed(empty, k)
    got = got[0] if isinstance(got, tuple) else got
    assert got.dtype == torch.float64 and torch.equal(got, fn(empty, k))
    legacy = _explore(lambda a, b: torch.cat([torch.empty(0), a, b]), torch.randn(3), torch.randn(2))
    assert legacy.verify().ok


@pytest.mark.parametrize("fn", [
    lambda a, b: torch.cat([a, a], 1),
    lambda a, b: torch.cat([a, b.t()], 0).sum(-1),
    lambda a, b: torch.cat([a, b.expand(4, 4)], 1) * 2,
    lambda a, b: torch.cat([a.t(), b, a], 0).amax(0),
], ids=["itself", "permuted_reduced", "broadcast", "three_reduced"])
def test_cat_in_every_position(fn: Callable[..., torch.Tensor]) -> None:
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    ex = _explore(fn, a, b if "expand" not in str(fn) else b)
    assert ex.verify().ok
    _same(ex, fn, torch.randn(4, 4), torch.randn(4, 4), exact=False)


def _write_slice(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    z = x.clone()
    z[:, 2:5] = y
    return z * 2


def _write_negative_slice(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    z = x.clone()
    z[1:, -3:] = y.sin()
    return z


# the padded read of a computed value (y.sin()) reads it from memory: its own kernel, then the write's
@pytest.mark.parametrize("fn, shapes, kernels", [(_write_slice, ((6, 8), (6, 3)), 1),
                                                 (_write_negative_slice, ((6, 6), (5, 3)), 2)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_slice_scatter_is_a_where_in_a_kernel(fn: Callable[..., torch.Tensor], shapes: Any, kernels: int,
                                              dtype: torch.dtype) -> None:
    inputs = [torch.randn(shape).to(dtype) for shape in shapes]
    ex = fl.explore(fn, *inputs)
    assert not [n.op for n in ex.decomposed.graph.nodes if n.kind == "extern"]
    assert _kernels(ex) == kernels
    torch.testing.assert_close(ex(*inputs), fn(*inputs))
    assert ex.verify().ok


def test_a_write_of_a_broadcast_value_of_another_dtype_through_a_view() -> None:
    """`z[:, 0] = y` with y of another dtype and a size-1 dim: aten.copy casts and broadcasts, in the kernel."""
    def f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        z = x.clone()
        z[:, 0] = y
        z[2:4].copy_(y[:1].to(torch.float32))
        return z

    x, y = torch.randn(6, 6), torch.randn(1, dtype=torch.float64)
    ex = _explore(f, x, y)
    _same(ex, f, x, y)


def test_slice_scatter_with_a_step_stays_extern_with_its_reason() -> None:
    def strided(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        z = x.clone()
        z[:, ::2] = y
        return z

    x, y = torch.randn(6, 8), torch.randn(6, 4)
    ex = fl.explore(strided, x, y)
    reasons = dict(ex.decomposed.fallbacks)
    assert any("step" in why for why in reasons.values()), reasons
    torch.testing.assert_close(ex(x, y), strided(x, y))


def test_select_scatter_and_slice_backward_in_training() -> None:
    """The gradients of x[:, 1] and x[:, 2:] (select_backward, slice_backward) are kernels, and match eager."""
    def f(x: torch.Tensor) -> torch.Tensor:
        return (x[:, 1].exp().sum() + x[:, 2:].sin().sum()) * 2

    x = torch.randn(5, 5, requires_grad=True)
    torch._dynamo.reset()
    from fusionlab import dynamo_backend

    compiled = torch.compile(f, backend="fusionlab")
    compiled(x).backward()
    ours = x.grad.clone()
    x.grad = None
    f(x).backward()
    torch.testing.assert_close(ours, x.grad)
    backward = dynamo_backend.graphs[-1]
    assert backward.role == "backward"
    externs = {n.op for n in backward.exploration.decomposed.graph.nodes if n.kind == "extern"}
    assert not {"aten.slice_scatter.default", "aten.select_scatter.default"} & externs, externs


def test_cross_entropy_gathers_the_logits_and_stores_only_row_statistics() -> None:
    # log_softmax(x)[i, t[i]] is x[i, t[i]] - amax[i] - log(sum[i]) (decompose/hoist.py): no kernel writes the
    # [rows, vocabulary] log-probabilities only to read one value per row back
    logits, targets = torch.randn(6, 5000), torch.randint(0, 5000, (6,))
    ex = _explore(F.cross_entropy, logits, targets)
    graph = ex.decomposed.graph
    written = [v for g in ex.fused.groups if g.is_kernel for v in g.outputs]
    assert all(graph[v].type.numel < logits.numel() for v in written), written
    _same(ex, F.cross_entropy, torch.randn(6, 5000), torch.randint(0, 5000, (6,)), exact=False)
    with pytest.raises(Exception, match="out of range"):  # a target past the vocabulary still raises
        ex(torch.randn(6, 5000), torch.tensor([0, 1, 5000, 2, 3, 4]))


def test_a_causal_lm_loss_gathers_its_bf16_logits_through_the_upcast_and_the_flatten() -> None:
    # transformers' loss: cross_entropy(logits.float().view(-1, vocab), labels.view(-1)). The gather moves up
    # through the reshape and the cast (decompose/hoist.py) to the bf16 logits, so no kernel writes the float32
    # [rows, vocabulary] upcast for the loss kernel to gather from
    def loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), labels.view(-1))

    logits, labels = torch.randn(2, 6, 3000).to(torch.bfloat16), torch.randint(0, 3000, (2, 6))
    ex = _explore(loss, logits, labels)
    graph = ex.decomposed.graph
    written = [v for g in ex.fused.groups if g.is_kernel for v in g.outputs]
    assert all(graph[v].type.numel < logits.numel() for v in written), written
    fresh = torch.randn(2, 6, 3000).to(torch.bfloat16), torch.randint(0, 3000, (2, 6))
    _same(ex, loss, *fresh, exact=False)


def test_a_gather_of_a_deep_shared_chain_decomposes_quickly() -> None:
    # y = y * y + y fourteen times: each value is read twice, so an unmemoised walk up the chain takes 2^14 paths
    def fn(y: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
        for _ in range(14):
            y = y * y * 0.5 + y
        return y[i]

    start = time.perf_counter()
    ex = _explore(fn, torch.rand(64, 4) * 0.1, torch.randint(0, 64, (8,)))  # decomposes, to check for externs
    assert time.perf_counter() - start < 10
    fresh, ids = torch.rand(64, 4) * 0.1, torch.randint(0, 64, (8,))
    torch.testing.assert_close(ex(fresh, ids), fn(fresh, ids))


# -- views of dense values: strides known, rows addressed by the flat row index -------------------------------------
def _rotate(x: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return x * table + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * (table + 1)


def _load_lines(ex: Any, operand: str) -> list[str]:
    return [line for kernel in ex.generated.kernels for line in kernel.source.splitlines()
            if "tl.load" in line and f"in_{operand} " in line]


@pytest.mark.parametrize("shape", [(3, 4, 8, 16), (4, 4, 4, 4), (2, 1, 5, 6)], ids=str)
def test_slices_of_a_dense_input_read_their_rows_by_the_flat_row_index(shape: tuple[int, ...]) -> None:
    # The rotary embedding's halves are slices of x: their strides follow from x's (made dense by the wrapper), so
    # the kernel reads each by `xindex * stride`, with no division for their leading dims
    x, table = torch.randn(shape), torch.randn(shape[-1])
    ex = _explore(_rotate, x, table)
    slices = [n.name for n in ex.decomposed.graph.nodes if n.op == "slice"]
    assert len(slices) == 2
    for name in slices:
        (line,) = _load_lines(ex, name)
        assert "xindex * stride_" in line and " d0 " not in line and "d1 *" not in line, line
    for fresh in (torch.randn(shape), torch.randn(*shape[:-2], shape[-1], shape[-2]).transpose(-1, -2)):
        _same(ex, _rotate, fresh, table, exact=False)  # a non-dense x is made dense first


def test_strides_of_the_wrappers_views_are_pytorchs() -> None:
    from fusionlab.codegen.program import view_layout
    from fusionlab.ir import contiguous_strides

    def check(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> None:
        ex = fl.explore(lambda t: fn(t) * 2, x)
        views = [n for n in ex.decomposed.graph.nodes if n.kind == "view"]
        assert views, "no view in the graph"
        graph, real = ex.decomposed.graph, fn(x)
        view = views[-1]
        source = graph[view.inputs[0]]
        layout = view_layout(view, source.type.shape, contiguous_strides(source.type.shape), 0)
        if source.name in graph.inputs or source.kind != "view":
            assert layout is not None or view.op == "reshape"
            if layout is not None:
                assert (tuple(layout[0]), layout[1]) == (real.stride(), real.storage_offset()), view.op

    x = torch.randn(3, 4, 5, 6)
    check(lambda t: t[..., 1:5:2], x)
    check(lambda t: t[:, -3:], x)
    check(lambda t: t.select(1, 2), x)
    check(lambda t: t.select(2, -1), x)
    check(lambda t: t.permute(2, 0, 3, 1), x)
    check(lambda t: t[:, :1].expand(3, 7, 5, 6), x)  # noqa: B023
    check(lambda t: t.reshape(12, 30), x)


def test_slices_under_dynamic_sizes_read_their_rows_by_the_flat_row_index() -> None:
    # a symbolic leading size: the strides collapse symbolically (stride[i] == size[i + 1] * stride[i + 1])
    def shifted(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x[..., 2:] * 2 + x[..., :-2], x * 3  # x read whole too: made dense, so its slices' strides are known

    ex = _explore(shifted, torch.randn(3, 4, 8, 16), dynamic=True)
    slices = [n.name for n in ex.decomposed.graph.nodes if n.op == "slice"]
    assert slices and all("xindex * stride_" in line and "d0" not in line
                          for name in slices for line in _load_lines(ex, name))
    for rows in (5, 2, 7):
        x = torch.randn(rows, 4, 8, 16)
        torch.testing.assert_close(ex(x), shifted(x))


def test_an_input_only_viewed_is_not_copied_and_its_views_stay_views() -> None:
    # a kernel reading a slice of an input the kernels do not read whole: the input is left as passed (no copy of
    # all of it), and a returned view of it is a view of the caller's tensor, as in eager
    def fn(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x[:, 1:], x[:, 1:] * 2

    ex = fl.explore(fn, torch.randn(64, 64))
    assert "x = x.contiguous()" not in ex.generated.wrapper
    x = torch.randn(64, 64).t()
    got = ex(x)
    assert got[0]._base is x or got[0].untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    torch.testing.assert_close(got[1], x[:, 1:] * 2)


def test_slices_past_the_end_are_clamped_as_in_eager() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.cat((x[:, 7:], x[:, 2:]), dim=1) * 2  # 7: of 5 columns is empty

    x = torch.randn(4, 5)
    ex = fl.explore(fn, x)
    torch.testing.assert_close(ex(x), fn(x))


def test_an_extern_result_returned_keeps_eagers_layout() -> None:
    # a convolution's result, returned and read through a view by a kernel, on a channels-last input
    def fn(i: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        c = F.conv2d(i, w)
        return c, c.permute(0, 2, 3, 1)[:, 1:] * 2

    i, w = torch.randn(2, 3, 8, 8), torch.randn(4, 3, 3, 3)
    ex = fl.explore(fn, i, w)
    channels_last = i.to(memory_format=torch.channels_last)
    got, want = ex(channels_last, w), fn(channels_last, w)
    assert got[0].stride() == want[0].stride()
    torch.testing.assert_close(got, want)


def test_a_reshape_of_a_strided_view_has_pytorchs_strides_or_none_where_it_copies() -> None:
    from fusionlab.codegen.program import view_layout

    x = torch.randn(2, 16, 192)
    ex = fl.explore(lambda t: t[..., 64:128].reshape(2, 16, 4, 16) * 2, x)
    (reshape,) = [n for n in ex.decomposed.graph.nodes if n.op == "reshape"]
    sliced = x[..., 64:128]
    assert view_layout(reshape, (2, 16, 64), sliced.stride(), 64) == (sliced.reshape(2, 16, 4, 16).stride(), 64)
    ex = fl.explore(lambda t: t.transpose(1, 2).reshape(2, -1) * 2, x)
    (reshape,) = [n for n in ex.decomposed.graph.nodes if n.op == "reshape"]
    assert view_layout(reshape, (2, 192, 16), x.transpose(1, 2).stride(), 0) is None  # PyTorch copies here


def test_views_an_extern_reads_are_made_in_one_step_from_their_dense_base() -> None:
    # GPT-2's heads: a slice of a projection, split into heads and permuted, read by a batched matmul
    def heads(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        projected = (x @ w).reshape(2, 16, 192)
        k = projected[..., 64:128].reshape(2, 16, 4, 16).permute(0, 2, 1, 3)
        q = projected[..., :64].reshape(2, 16, 4, 16).permute(0, 2, 1, 3)
        return torch.softmax(q @ k.transpose(-1, -2), -1)

    x, w = torch.randn(32, 64), torch.randn(64, 192)
    ex = fl.explore(heads, x, w)
    wrapper = ex.generated.wrapper
    assert wrapper.count("reinterpret(") >= 2 and ".narrow(" not in wrapper and ".permute(" not in wrapper, wrapper
    for _ in range(2):
        fresh = (torch.randn(32, 64), torch.randn(64, 192))
        torch.testing.assert_close(ex(*fresh), heads(*fresh))


def test_reinterpret_falls_back_to_as_strided_with_the_same_meaning() -> None:
    from fusionlab.runtime.runnable import _as_strided, reinterpret

    base = torch.arange(40.0)[4:]  # a storage offset of its own: the offset given is past it
    for made in (reinterpret(base, (3, 4), (1, 3), 2), _as_strided(base, (3, 4), (1, 3), 2)):
        assert made.storage_offset() == 6
        torch.testing.assert_close(made, base[2:].as_strided((3, 4), (1, 3)))
