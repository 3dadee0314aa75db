"""The fusion pass: decisions as records, replay, what-if changes, forced fusions, user policies, no cycles."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F

import fusionlab as fl
from fusionlab import GroupInfo, Verdict
from fusionlab.compare import TOLERANCES
from tests.cases import CASES, find


def softmax_exploration(policy: str = "default") -> fl.Exploration:
    return fl.explore(lambda x: torch.softmax(x, -1), torch.randn(8, 32), policy=policy)


@pytest.mark.parametrize("policy", ["none", "pointwise", "default"])
def test_every_decision_is_a_record_with_a_reason(policy: str) -> None:
    fused = softmax_exploration(policy).fused
    assert fused.decisions, "every pair considered is recorded"
    nodes = {n.name for n in fused.previous.graph.nodes}
    for step, decision in enumerate(fused.decisions):
        assert isinstance(decision, fl.FusionDecision)
        assert decision.step == step
        assert decision.producer in nodes and decision.consumer in nodes
        assert isinstance(decision.reason, str) and len(decision.reason) > 10, decision
        assert decision.bytes_saved >= 0
        if not decision.fused:
            assert decision.bytes_saved == 0
    assert fused.policy_name == policy


def test_bytes_saved_add_up_for_softmax() -> None:
    """Fusing softmax saves the round trips of its intermediates: each fused row-sized or full-sized value that
    no longer goes through memory saves its bytes written and read."""
    default, none = softmax_exploration("default").fused, softmax_exploration("none").fused
    saved = sum(d.bytes_saved for d in default.decisions)
    moved_unfused = sum(g.bytes_read + g.bytes_written for g in none.groups)
    moved_fused = sum(g.bytes_read + g.bytes_written for g in default.groups)
    assert saved > 0
    assert moved_fused == 8 * 32 * 4 * 2  # read x once, write the result once
    assert moved_unfused - moved_fused == saved
    assert all(d.bytes_saved > 0 for d in default.decisions if d.fused and
               default.previous.graph[d.producer].kind != "view")


def test_reasons_name_what_blocked_the_fusion() -> None:
    ex = fl.explore(lambda x, w: F.gelu(x @ w) * 2, torch.randn(8, 32), torch.randn(32, 16))
    reasons = [d.reason for d in ex.fused.decisions if not d.fused]
    assert any("extern op" in r and "mm" in r for r in reasons), reasons
    none = softmax_exploration("none").fused
    assert all("policy 'none'" in d.reason for d in none.decisions)
    pointwise = softmax_exploration("pointwise").fused
    assert any("keeps reductions" in d.reason for d in pointwise.decisions)


def test_groups_after_replays_the_decisions() -> None:
    fused = softmax_exploration("default").fused
    computing = [n.name for n in fused.previous.graph.nodes if n.kind != "input"]
    before = fused.groups_after(-1)
    assert sorted(name for group in before for name in group) == sorted(computing)
    assert all(len(group) == 1 for group in before)
    previous = before
    for decision in fused.decisions:
        after = fused.groups_after(decision.step)
        assert sorted(n for g in after for n in g) == sorted(computing), "a partition of the same nodes"
        assert len(after) == len(previous) - (1 if decision.fused else 0)
        if decision.fused:
            together = next(g for g in after if decision.consumer in g)
            assert decision.producer in together
        previous = after
    final = {tuple(g.nodes) for g in fused.groups}
    assert set(fused.groups_after(len(fused.decisions) - 1)) == final
    assert [partition for _, partition in fused.replay()] == [fused.groups_after(d.step) for d in fused.decisions]


def test_groups_come_in_an_order_that_runs() -> None:
    """A group reading a value made later in program order (an extern constant feeding a fused chain) runs after
    the group making it."""
    ex = fl.explore(lambda x: torch.where(x > 0, x, torch.tensor(0.5) * torch.tensor([2.0]).sum()),
                    torch.randn(8, 32), policy="pointwise")
    made: set[str] = set(ex.decomposed.graph.inputs)
    for group in ex.fused.groups:
        assert set(group.inputs) <= made, f"{group.name} reads {set(group.inputs) - made} before they exist"
        made |= set(group.nodes)
    assert ex.verify().ok


def test_forbid_splits_a_kernel() -> None:
    ex = softmax_exploration("default")
    assert len(ex.fused.kernels) == 1
    fused_pair = next(d for d in ex.fused.decisions if d.fused and ex.decomposed.graph[d.producer].kind != "view")
    split = ex.with_fusion(forbid=[(fused_pair.producer, fused_pair.consumer)])
    assert len(split.fused.kernels) == 2, split.fused.as_text()
    assert any(not d.fused and "forbidden by the user" in d.reason for d in split.fused.decisions)
    assert split.captured is ex.captured and split.decomposed is ex.decomposed  # shared, not recomputed
    assert len(ex.fused.kernels) == 1, "the original exploration is unchanged"
    assert split.verify().ok


def test_force_fuses_what_the_policy_keeps_apart() -> None:
    ex = fl.explore(lambda x: torch.sigmoid(x) * 2 + 1, torch.randn(8, 32), policy="none")
    assert len(ex.fused.kernels) == 3
    first = ex.fused.decisions[0]
    forced = ex.with_fusion(force=[(first.producer, first.consumer)])
    assert len(forced.fused.kernels) == 2
    assert any(d.fused and "forced by the user" in d.reason for d in forced.fused.decisions)
    assert forced.verify().ok


def test_illegal_force_raises_a_clear_error() -> None:
    # Two reductions over different axes cannot share one kernel.
    ex = fl.explore(lambda x: (x - x.mean(1, keepdim=True)).sum(0), torch.randn(8, 32), policy="none")
    graph = ex.decomposed.graph
    reductions = [n.name for n in graph.nodes if n.kind == "reduction"]
    assert len(reductions) == 2
    sub = next(n.name for n in graph.nodes if n.op == "sub")
    epilogue = ex.with_fusion(force=[(reductions[0], sub)])  # through the expand view between them: legal
    assert len(epilogue.fused.kernels) == 2 and epilogue.verify().ok
    with pytest.raises(fl.FusionError, match=r"does not read"):
        ex.with_fusion(force=[(reductions[0], reductions[1])])  # not a producer/consumer pair at all
    with pytest.raises(fl.FusionError, match=r"cannot force fusing .* into .*: .*(axes|iteration|shape)"):
        ex.with_fusion(force=[(reductions[0], sub), (sub, reductions[1])])

    # An extern op never joins a kernel.
    mm = fl.explore(lambda x, w: (x @ w).relu(), torch.randn(8, 32), torch.randn(32, 16))
    extern = next(n.name for n in mm.decomposed.graph.nodes if n.kind == "extern")
    relu = next(n.name for n in mm.decomposed.graph.nodes if n.kind == "pointwise")
    with pytest.raises(fl.FusionError, match="extern op"):
        mm.with_fusion(force=[(extern, relu)])


def test_unknown_names_are_reported_with_the_known_ones() -> None:
    ex = softmax_exploration()
    with pytest.raises(fl.FusionError, match=r"no node named 'nope'.*its nodes are: .*amax"):
        ex.with_fusion(forbid=[("nope", "amax")])


def test_fusing_across_a_third_kernel_would_be_a_cycle() -> None:
    """exp feeds add directly and through mm (an extern): one kernel for exp and add would have to run both
    before and after mm."""
    ex = fl.explore(lambda x, w: x.exp() + (x.exp() @ w), torch.randn(8, 32), torch.randn(32, 32))
    graph = ex.decomposed.graph
    exp = next(n.name for n in graph.nodes if n.op == "exp")
    add = next(n.name for n in graph.nodes if n.op == "add")
    decision = next(d for d in ex.fused.decisions if (d.producer, d.consumer) == (exp, add))
    assert not decision.fused and "cycle" in decision.reason
    with pytest.raises(fl.FusionError, match="cycle"):
        ex.with_fusion(force=[(exp, add)])
    assert ex.verify().ok

    # The same shape with a reduction in the middle, under a policy that keeps reductions apart.
    pointwise = fl.explore(lambda x: x.exp() / x.exp().sum(-1, keepdim=True), torch.randn(8, 32),
                           policy="pointwise")
    assert any("cycle" in d.reason for d in pointwise.fused.decisions)
    assert pointwise.verify().ok


@pytest.mark.parametrize("case", [c for c in CASES if "single" not in c.tags], ids=lambda c: c.name)
def test_no_group_depends_on_itself(case: object) -> None:
    """For every case, the groups form a DAG in the order they run."""
    args, kwargs = case.make_inputs("cpu")  # type: ignore[attr-defined]
    for policy in ("pointwise", "default"):
        fused = fl.explore(case.callable_on("cpu"), *args, policy=policy, **kwargs).fused  # type: ignore[attr-defined]
        position = {name: index for index, group in enumerate(fused.groups) for name in group.nodes}
        for index, group in enumerate(fused.groups):
            for value in group.inputs:
                assert position.get(value, -1) < index, f"{group.name} reads {value} from a later group"


class OnlyAfterExp:
    """A user policy: fuse a pair only when the producer is a lone exponential."""

    name = "only-after-exp"

    def can_fuse(self, producer: GroupInfo, consumer: GroupInfo) -> Verdict:
        if producer.kind == "extern" or consumer.kind == "extern":
            return Verdict(False, "extern")
        alone = producer.ops == ("exp",)
        return Verdict(alone, "fuse only after exp" if alone else "no lone exp here")

    def score(self, producer: GroupInfo, consumer: GroupInfo) -> int:
        return 0


def test_user_policy() -> None:
    fn = lambda x: torch.exp(x).sin() * 2  # noqa: E731
    ex = fl.explore(fn, torch.randn(8, 32), policy=OnlyAfterExp())
    assert ex.fused.policy_name == "only-after-exp"
    reasons = {d.reason for d in ex.fused.decisions}
    assert reasons == {"fuse only after exp", "no lone exp here"}
    assert len(ex.fused.kernels) == 2  # exp+sin | mul
    assert ex.verify().ok
    assert len(fl.explore(fn, torch.randn(8, 32), policy="pointwise").fused.kernels) == 1


def test_builtin_policy_objects_and_bad_policies() -> None:
    x = torch.randn(8, 32)
    assert len(fl.explore(lambda t: torch.softmax(t, -1), x, policy=fl.DefaultFusion()).fused.kernels) == 1
    assert len(fl.explore(lambda t: t.exp().sin(), x, policy=fl.NoFusion()).fused.kernels) == 2
    with pytest.raises(ValueError, match="unknown fusion policy 'fastest'"):
        fl.explore(lambda t: t, x, policy="fastest")
    with pytest.raises(TypeError, match="can_fuse"):
        fl.explore(lambda t: t, x, policy=object())  # type: ignore[arg-type]


def test_multi_output_group() -> None:
    """A value both stored and used further in the same kernel: one kernel, two outputs."""
    case = find("add_layer_norm")
    args, _ = case.make_inputs("cpu")
    ex = fl.explore(case.fn, *args)
    (kernel,) = ex.fused.kernels
    assert len(kernel.outputs) == 2


def test_a_reshape_of_a_reshape_is_one_reshape() -> None:
    """x.view(6, 8).view(48) reshapes x once: no intermediate view between kernels, and the result is eager's."""
    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.exp(x.view(6, 8).view(2, 24) + 1)

    x = torch.randn(4, 12)
    ex = fl.explore(fn, x)
    reshapes = [n for n in ex.decomposed.graph.nodes if n.op == "reshape"]
    assert [(n.inputs, n.type.shape) for n in reshapes] == [(("x",), (2, 24))]
    fresh = torch.randn_like(x)
    torch.testing.assert_close(ex(fresh), fn(fresh))


def _attention_scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """q and k come in as [batch, tokens, heads * 16]; heads split as in a transformer's attention."""
    q, k = (t.view(2, 8, 3, 16).transpose(1, 2) for t in (q, k))
    return torch.softmax(q @ k.transpose(-2, -1), dim=-1)


def test_a_transposed_operand_of_a_product_is_copied_in_its_own_order() -> None:
    """aten copies k.transpose(-2, -1) before bmm; the copy keeps k's order (a contiguous read and write) and the
    product gets a transposed view of it."""
    q, k = torch.randn(2, 8, 48), torch.randn(2, 8, 48)
    ex = fl.explore(_attention_scores, q, k)
    graph = ex.decomposed.graph
    copies = [n for n in graph.nodes if n.op == "copy" and n.type.shape == (2, 3, 16, 8)]
    assert not copies, "no copy writes k transposed"
    (permute,) = [n for n in graph.nodes if n.op == "permute" and graph[n.inputs[0]].op == "copy"]
    assert permute.param("dims") == (0, 1, 3, 2) and permute.type.shape == (2, 3, 16, 8)
    fresh = (torch.randn_like(q), torch.randn_like(k))
    torch.testing.assert_close(ex(*fresh), _attention_scores(*fresh))


@pytest.mark.parametrize("fn", [
    lambda q, k: k.transpose(-2, -1).contiguous(),  # the copy is the output: it stays contiguous
    lambda q, k: torch.exp(k.transpose(-2, -1).contiguous()) + q.transpose(-2, -1),  # a kernel reads it
])
def test_other_copies_of_a_transpose_keep_the_transposed_order(fn: object) -> None:
    q, k = torch.randn(2, 3, 8, 16), torch.randn(2, 3, 8, 16)
    ex = fl.explore(fn, q, k)  # type: ignore[arg-type]
    fresh = (torch.randn_like(q), torch.randn_like(k))
    got = ex(*fresh)
    torch.testing.assert_close(got, fn(*fresh))  # type: ignore[operator]
    assert got.is_contiguous()


# -- fusion through a permute: the kernel reads the reordered dimensions by index, nothing is written in between ----
def _nhwc(x: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    return torch.relu(x * scale + shift).permute(0, 2, 3, 1).contiguous()


@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (2, 4, 4, 4)], ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_a_pointwise_chain_writes_straight_into_a_permuted_layout(shape: tuple[int, ...], dtype: torch.dtype,
                                                                  device: str) -> None:
    """relu(x * s + b).permute(0, 2, 3, 1).contiguous() is one kernel: the permute is index arithmetic, x is read
    at the reordered index and the result written in NHWC order (square sizes included: no shape-based guess)."""
    def make() -> tuple[torch.Tensor, ...]:
        return (torch.randn(shape, device=device, dtype=dtype),
                torch.randn(1, shape[1], 1, 1, device=device, dtype=dtype),
                torch.randn(1, shape[1], 1, 1, device=device, dtype=dtype))

    ex = fl.explore(_nhwc, *make())
    assert len(ex.fused.kernels) == 1, ex.fused.as_text()
    assert not [g for g in ex.fused.groups if g.kind == "view"], "no view between kernels"
    fresh = make()
    got = ex(*fresh)
    atol, rtol = TOLERANCES[dtype]  # bfloat16: eager rounds x * s before adding b, the kernel keeps float32
    torch.testing.assert_close(got, _nhwc(*fresh), atol=atol, rtol=rtol)
    assert got.is_contiguous()


@pytest.mark.parametrize("fn", [
    lambda x: (x.sin() * 2).transpose(-2, -1) + x,  # a computed value read transposed and in order
    lambda x: torch.softmax(x.transpose(-2, -1) * 3, -1),  # a reduction over a transposed input
    lambda x: x.exp().permute(0, 2, 1).sum(-1),  # a reduction over a permuted computed value
    lambda x: (x.relu(), x.relu().transpose(-2, -1).contiguous()),  # one value stored in both orders
], ids=["transposed_and_not", "softmax_of_transpose", "sum_of_permute", "both_orders"])
@pytest.mark.parametrize("n", [4, 5])
def test_permutes_inside_kernels_match_eager(fn: Any, n: int, device: str) -> None:
    ex = fl.explore(fn, torch.randn(3, n, n, device=device))
    assert len(ex.fused.kernels) == 1, ex.fused.as_text()
    fresh = torch.randn(3, n, n, device=device)
    expected, got = fn(fresh), ex(fresh)
    expected, got = (v if isinstance(v, tuple) else (v,) for v in (expected, got))
    for e, g in zip(expected, got, strict=True):
        torch.testing.assert_close(g, e)


def test_a_reduction_read_through_a_permute_is_not_fused() -> None:
    """x / x.sum(1, keepdim=True).t() on a square x reads the sums along the other axis: two kernels, and why."""
    ex = fl.explore(lambda x: x / x.sum(1, keepdim=True).t(), torch.rand(5, 5))
    assert len(ex.fused.kernels) == 2
    assert any("along another axis" in d.reason for d in ex.fused.decisions if not d.fused), ex.fused.as_text()
    fresh = torch.rand(5, 5)
    torch.testing.assert_close(ex(fresh), fresh / fresh.sum(1, keepdim=True).t())


def test_a_transposed_product_is_not_an_epilogue() -> None:
    """A Triton matmul's epilogue sees the accumulator's tile at its own positions: (a @ b).t() + c runs the add in
    a kernel of its own, and says why; a transposed operand of the epilogue (a @ b + c.t()) still fuses."""
    a, b, c = (torch.randn(16, 16) for _ in range(3))
    ex = fl.explore(lambda a, b, c: ((a @ b).t() + c).contiguous(), a, b, c, matmul="triton")
    assert len(ex.fused.kernels) == 2
    assert any("other positions than its own" in d.reason for d in ex.fused.decisions if not d.fused)
    torch.testing.assert_close(ex(a, b, c), (a @ b).t() + c)
    # returned as it is, eager lays the sum out column-major (its first operand's order): stored so, at the
    # product's own positions, the add is its epilogue
    ex = fl.explore(lambda a, b, c: (a @ b).t() + c, a, b, c, matmul="triton")
    assert len(ex.fused.kernels) == 1, ex.fused.as_text()
    got, expected = ex(a, b, c), (a @ b).t() + c
    torch.testing.assert_close(got, expected)
    assert got.stride() == expected.stride() == (1, 16)
    ex = fl.explore(lambda a, b, c: torch.relu(a @ b + c.t()), a, b, c, matmul="triton")
    assert len(ex.fused.kernels) == 1, ex.fused.as_text()
    torch.testing.assert_close(ex(a, b, c), torch.relu(a @ b + c.t()))


def test_a_view_an_extern_also_reads_stays_between_kernels() -> None:
    """q = x.t() read by a kernel and by a matrix product: the kernel does not write a copy of q for the product
    (between kernels, the view costs nothing)."""
    def fn(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        q = x.t()
        return q * 2, q @ w

    x, w = torch.randn(6, 5), torch.randn(6, 3)
    ex = fl.explore(fn, x, w)
    (kernel,) = ex.fused.kernels
    # (q * 2 stored in q's column-major order, as eager lays it out: no copy of q itself)
    assert kernel.outputs == ("mul_eager_layout",), ex.fused.as_text()
    assert any("stays a view between kernels" in d.reason for d in ex.fused.decisions if not d.fused)
    for got, expected in zip(ex(x, w), fn(x, w)):
        torch.testing.assert_close(got, expected)
        assert got.stride() == expected.stride()


def test_a_stored_reshape_of_another_rank_is_stored_at_its_own_index() -> None:
    """c = a.unsqueeze(0) * 2 and its reshape r, both returned: one kernel walks c's [1, 6], and stores r at r's own
    index map (the map of c's rank wrote 5 of r's 6 elements wrong before)."""
    def fn(a: torch.Tensor) -> tuple[torch.Tensor, ...]:
        c = a.unsqueeze(0) * 2
        r = c.reshape(6)
        return c, r, r + 1

    ex = fl.explore(fn, torch.randn(6))
    assert len(ex.fused.kernels) == 1, ex.fused.as_text()
    fresh = torch.randn(6)
    for got, expected in zip(ex(fresh), fn(fresh), strict=True):
        torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (2, 4, 4, 4), (1, 1, 1, 1), (3, 1, 2, 1)], ids=str)
def test_a_kernel_stores_a_value_and_its_permuted_copy(shape: tuple[int, ...]) -> None:
    """`(y, y.permute(...).contiguous())`: one kernel stores y and the copy at its permuted positions
    (`fusion.domain.permuted_store`), square or not; a permute that moves only size-1 dimensions is a plain store."""
    def fn(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        y = torch.relu(x) * 2
        return y, y.permute(0, 2, 3, 1).contiguous(), (y.sum((0, 2, 3), keepdim=True) * y).permute(3, 1, 0, 2) + 0
    from fusionlab.fusion.domain import permuted_store

    x = torch.randn(shape)
    ex = fl.explore(fn, x)
    graph = ex.decomposed.graph
    permuted = [v for g in ex.fused.groups if g.domain is not None for v in g.outputs
                if permuted_store(graph, graph[v], g.domain) is not None]
    moves = shape[1] != 1 and (shape[2] != 1 or shape[3] != 1)  # NHWC moves C past a non-unit H or W
    assert bool(permuted) == moves, (permuted, ex.fused.as_text())
    fresh = torch.randn(shape)
    for got, want in zip(ex(fresh), fn(fresh), strict=True):
        torch.testing.assert_close(got, want)
        assert [s for s, d in zip(got.stride(), got.shape) if d > 1] == \
            [s for s, d in zip(want.stride(), want.shape) if d > 1]


def test_a_write_through_a_transposed_view_of_a_one_element_input_through_the_backend() -> None:
    """Fuzz seed 370384: a permuted store of a [1, 1] value (only size-1 dimensions move) crashed at its first call."""
    def fn(c: torch.Tensor) -> torch.Tensor:
        c.t().transpose(0, -1)[0].sub_(1)
        return c.unsqueeze(2)

    torch._dynamo.reset()
    c = torch.randn(1, 1, dtype=torch.float64)
    twin = c.clone()
    got, want = torch.compile(fn, backend="fusionlab")(c), fn(twin)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(c, twin)
    torch._dynamo.reset()
