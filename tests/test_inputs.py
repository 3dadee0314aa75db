"""Call-time inputs against the capture: clear errors for what cannot run, dynamic leading sizes for what can."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import fusionlab as fl


def gelu_softmax(x: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.softmax(F.gelu(x + b), -1)


@pytest.fixture
def static() -> fl.Exploration:
    return fl.explore(gelu_softmax, torch.randn(8, 32), torch.randn(32))


def test_wrong_rank(static: fl.Exploration) -> None:
    with pytest.raises(fl.InputMismatch, match=r"input 'x' has rank 3 .* captured with rank 2 .*explore again"):
        static(torch.randn(2, 8, 32), torch.randn(32))


def test_wrong_dtype(static: fl.Exploration) -> None:
    with pytest.raises(fl.InputMismatch, match=r"input 'b' is torch.float16; it was captured as torch.float32: "
                                                r"convert it \(.to\(torch.float32\)\)"):
        static(torch.randn(8, 32), torch.randn(32).half())


def test_wrong_device(static: fl.Exploration) -> None:
    with pytest.raises(fl.InputMismatch, match=r"input 'x' is on meta; it was captured on cpu: move it"):
        static(torch.empty(8, 32, device="meta"), torch.randn(32))


def test_fixed_size(static: fl.Exploration) -> None:
    with pytest.raises(fl.InputMismatch, match=r"input 'x' has size 9 in dimension 0; .*\(expecting 8\): use "
                                                r"dynamic=True"):
        static(torch.randn(9, 32), torch.randn(32))
    with pytest.raises(fl.InputMismatch, match=r"input 'b' has size 16 in dimension 0"):
        static(torch.randn(8, 32), torch.randn(16))


def test_module_parameters_are_checked_too() -> None:
    """A module's parameters are graph inputs: changing one's dtype after capture is caught, by name."""
    module = torch.nn.Sequential(torch.nn.LayerNorm(32), torch.nn.GELU()).eval()
    ex = fl.explore(module, torch.randn(8, 32))
    torch.testing.assert_close(ex(torch.randn(8, 32)).shape, torch.Size([8, 32]))
    module.double()
    with pytest.raises(fl.InputMismatch, match=r"input '0.weight' is torch.float64"):
        ex(torch.randn(8, 32))


def test_python_scalars_are_specialised() -> None:
    ex = fl.explore(lambda x, alpha: x * alpha, torch.randn(8, 32), 2.0)
    torch.testing.assert_close(ex(torch.ones(8, 32), 2.0), torch.full((8, 32), 2.0))
    with pytest.raises(ValueError, match=r"was 2.0 at capture and is 3.0 now: Python scalars are specialised"):
        ex(torch.randn(8, 32), 3.0)
    with pytest.raises(TypeError, match="the example inputs were 2 positional argument"):
        ex(torch.randn(8, 32))


@pytest.mark.parametrize("fn", [
    gelu_softmax,
    lambda x, b: (x * b).sum(0),  # a reduction over the dynamic axis
    lambda x, b: F.layer_norm(x + b, (32,)),
    lambda x, b: (x - x.mean(-1, keepdim=True)) * b,
], ids=["gelu_softmax", "sum_axis0", "layer_norm", "center"])
def test_dynamic_batch_reuses_the_kernels(fn: object) -> None:
    ex = fl.explore(fn, torch.randn(8, 32), torch.randn(32), dynamic=True)
    assert ex.captured.dynamic
    generated, compiled = ex.generated, ex.compiled
    sources = [k.source for k in generated.kernels]
    for batch in (3, 5, 17, 64):
        x, b = torch.randn(batch, 32), torch.randn(32)
        torch.testing.assert_close(ex(x, b), fn(x, b), atol=1e-5, rtol=1e-5)  # type: ignore[operator]
    assert ex.generated is generated and ex.compiled is compiled, "no regeneration for a new batch size"
    assert [k.source for k in ex.generated.kernels] == sources
    assert all(len(handle.modules) == 1 for handle in compiled.handles), "each kernel built once"
    assert "s0" in generated.wrapper  # the batch size is read from the input at run time


def test_dynamic_still_checks_the_fixed_sizes() -> None:
    ex = fl.explore(lambda x, w: x * w, torch.randn(8, 32), torch.randn(8, 32), dynamic=True)
    ex(torch.randn(5, 32), torch.randn(5, 32))
    with pytest.raises(fl.InputMismatch, match=r"size 31 in dimension 1"):
        ex(torch.randn(5, 31), torch.randn(5, 31))
    with pytest.raises(fl.InputMismatch, match=r"size 4 in dimension 0"):
        ex(torch.randn(5, 32), torch.randn(4, 32))  # both leading sizes were captured equal
    with pytest.raises(fl.InputMismatch, match=r"dynamic leading size of 1 is specialised away"):
        ex(torch.randn(1, 32), torch.randn(1, 32))


def test_non_contiguous_inputs_at_call_time() -> None:
    """Captured contiguous, called with a transposed or sliced tensor of the same shape: still correct."""
    ex = fl.explore(lambda x: torch.softmax(x * 2, -1), torch.randn(8, 32))
    for x in (torch.randn(32, 8).t(), torch.randn(8, 64)[:, ::2], torch.randn(1, 32).expand(8, 32)):
        torch.testing.assert_close(ex(x), torch.softmax(x * 2, -1))


@pytest.mark.gpu
def test_cuda_inputs_for_a_cpu_capture() -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device here")
    ex = fl.explore(gelu_softmax, torch.randn(8, 32), torch.randn(32))
    with pytest.raises(fl.InputMismatch, match=r"is on cuda:0; it was captured on cpu"):
        ex(torch.randn(8, 32, device="cuda"), torch.randn(32, device="cuda"))
    on_gpu = fl.explore(gelu_softmax, torch.randn(8, 32, device="cuda"), torch.randn(32, device="cuda"))
    assert on_gpu.verify().ok
    backends = {b for info in on_gpu.compiled.kernels for b in info.backends}
    assert backends and "interpreter" not in backends, backends  # real Triton on CUDA, chosen per launch
