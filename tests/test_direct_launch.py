"""Launches after the first of a shape call the compiled kernel's own launcher (runtime/direct.py): the key that
decides when that is safe, and on the GPU, that results stay right when Triton would specialise differently."""

from __future__ import annotations

import functools
from typing import Any

import pytest
import torch
import triton
from triton import knobs

import fusionlab as fl
from fusionlab.runtime.direct import specialization_key


def test_the_key_tells_apart_what_triton_specialises_on() -> None:
    buffer = torch.zeros(64)
    aligned, shifted = buffer[:32], buffer[1:33]  # 4-byte offset: not 16-byte aligned
    base = specialization_key((aligned, 16, 3))
    assert specialization_key((buffer[16:48], 32, 5)) == base  # same dtype and alignment, same integer classes
    assert specialization_key((shifted, 16, 3)) != base
    assert specialization_key((aligned.half(), 16, 3)) != base
    assert specialization_key((aligned, 8, 3)) != base  # divisibility by 16
    assert specialization_key((aligned, 16, 1)) != base  # the value 1
    assert specialization_key((aligned, 16, 2**31)) != base  # a 64-bit integer
    assert specialization_key((aligned, True)) != specialization_key((aligned, False))


def needs_cuda() -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device here")


def scaled_softmax(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x * 0.5 + bias, -1)


def launches_of(ex: fl.Exploration) -> list[Any]:
    return [launch for handle in ex.compiled.handles for launch in handle.ready.values()]


def called_three_times() -> fl.Exploration:
    """`scaled_softmax` explored on the GPU and called on three fresh inputs, each result checked against eager."""
    needs_cuda()
    x, bias = torch.randn(64, 256, device="cuda"), torch.randn(256, device="cuda")
    ex = fl.explore(scaled_softmax, x, bias)
    for _ in range(3):
        fresh = (torch.randn_like(x), torch.randn_like(bias))
        torch.testing.assert_close(ex(*fresh), scaled_softmax(*fresh))
    return ex


@pytest.mark.gpu
def test_second_launches_use_the_launcher_and_stay_right() -> None:
    (launch,) = launches_of(called_three_times())
    assert len(launch.launchers) == 1 and launch.tail is not None


def test_a_launcher_of_another_form_than_triton_36s_is_called_as_it_is() -> None:
    """Only Triton 3.6's launcher, recognised by its `__call__`'s code, is bypassed for its C function; another
    form (this Triton's, when it is not 3.6, or any class) keeps its own `__call__`, given the kernel's metadata."""
    from types import SimpleNamespace

    from triton.backends.nvidia.driver import CudaLauncher

    from fusionlab.runtime.direct import _launcher

    launcher = object.__new__(CudaLauncher)  # no CUDA needed: only its class and attributes are read
    launcher.__dict__.update(global_scratch_size=0, profile_scratch_size=0, launch=print, launch_cooperative_grid=False,
                             launch_pdl=False)
    compiled = SimpleNamespace(run=launcher, packed_metadata=("metadata",), function=7)
    run, function, head = _launcher(compiled)
    if triton.__version__.startswith("3.6."):
        assert run is print and head == (False, False, None, None, ("metadata",), None, None, None)
    else:
        assert run is launcher and head == (("metadata",), None, None, None)
    assert function == 7
    other = SimpleNamespace(run=lambda *args: None, packed_metadata=("metadata",), function=7)
    assert _launcher(other)[0] is other.run


@pytest.mark.gpu
def test_triton_36s_launcher_is_called_through_its_c_function() -> None:
    (launch,) = launches_of(called_three_times())
    ((run, _, _),) = launch.launchers.values()
    direct = type(run).__name__ == "builtin_function_or_method"
    assert direct == triton.__version__.startswith("3.6."), (triton.__version__, run)


@pytest.mark.gpu
def test_an_argument_triton_would_specialise_differently_goes_through_the_jit() -> None:
    needs_cuda()
    x, bias = torch.randn(64, 256, device="cuda"), torch.randn(256, device="cuda")
    ex = fl.explore(scaled_softmax, x, bias)
    ex(x, bias)
    ex(x, bias)
    storage = torch.randn(64 * 256 + 1, device="cuda")
    shifted = storage[1:].view(64, 256)  # contiguous, but 4 bytes off 16-byte alignment
    torch.testing.assert_close(ex(shifted, bias), scaled_softmax(shifted, bias))
    (launch,) = launches_of(ex)
    assert len(launch.launchers) == 2


@pytest.mark.gpu
def test_launch_hooks_see_every_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    needs_cuda()
    x, bias = torch.randn(64, 256, device="cuda"), torch.randn(256, device="cuda")
    ex = fl.explore(scaled_softmax, x, bias)
    ex(x, bias)
    seen: list[Any] = []
    monkeypatch.setattr(knobs.runtime, "launch_enter_hook", seen.append)
    torch.testing.assert_close(ex(x, bias), scaled_softmax(x, bias))
    assert len(seen) == len(ex.compiled.handles)


def test_empty_hook_chains_are_not_hooks(monkeypatch: pytest.MonkeyPatch) -> None:
    from fusionlab.runtime.direct import hooks_active

    assert not hooks_active()  # Triton's own default: an empty chain (3.6, 3.9) or None
    monkeypatch.setattr(knobs.runtime, "launch_enter_hook", print)
    assert hooks_active()


def checked(ex: fl.Exploration) -> dict[str, list[tuple[str, str]]]:
    """Per kernel, the (role, value) of each launch argument the program checks on every call."""
    program = ex.generated.program
    return {k.name: [(k.arguments[i].role, k.arguments[i].value) for i in program.launch_checks[k.name]]
            for k in program.kernels}


def test_the_program_checks_inputs_and_not_its_own_buffers() -> None:
    x, bias = torch.randn(64, 256), torch.randn(256)
    ex = fl.explore(scaled_softmax, x, bias)
    (roles,) = checked(ex).values()
    # both inputs; the output (allocated by the program) and the sizes (written as numbers): never
    assert sorted(roles) == sorted(("input", value) for value in ex.decomposed.graph.inputs)


def test_a_kernel_reading_an_extern_result_checks_nothing() -> None:
    def mm_gelu(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(a @ b)

    ex = fl.explore(mm_gelu, torch.randn(32, 48), torch.randn(48, 64))
    kernels = checked(ex)
    assert kernels and all(roles == [] for roles in kernels.values())  # a fresh mm result, its output, numbers
    a, b = torch.randn(32, 48), torch.randn(48, 64)
    torch.testing.assert_close(ex(a, b), mm_gelu(a, b))


def test_strides_read_at_run_time_are_checked() -> None:
    def softmax_across(x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x.transpose(1, 2) * 2, -1)

    # a transposed input: its layout is the caller's, read at run time (the transpose inside is index arithmetic)
    ex = fl.explore(softmax_across, torch.randn(3, 6, 4).transpose(1, 2), dynamic=True)
    (roles,) = checked(ex).values()
    assert roles == [("input", "x")] + [("stride", "x")] * 3  # the caller's layout, every call
    for x in (torch.randn(5, 4, 6), torch.randn(5, 6, 4).transpose(1, 2)):
        torch.testing.assert_close(ex(x), softmax_across(x))


def test_a_program_refuses_inputs_of_other_dtypes() -> None:
    x, bias = torch.randn(64, 256), torch.randn(256)
    ex = fl.explore(scaled_softmax, x, bias)
    with pytest.raises(TypeError, match=r"input 0: torch.float64 \(generated for torch.float32\)"):
        ex.compiled(*[t.double() if t.shape == x.shape else t for t in ex.flat_inputs((x, bias), {})])


@pytest.mark.gpu
def test_a_kernel_with_nothing_to_check_keys_on_nothing_and_stays_right() -> None:
    needs_cuda()

    def mm_gelu(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(a @ b)

    a, b = torch.randn(32, 48, device="cuda"), torch.randn(48, 64, device="cuda")
    ex = fl.explore(mm_gelu, a, b)
    for _ in range(3):
        fresh = (torch.randn_like(a), torch.randn_like(b))
        torch.testing.assert_close(ex(*fresh), mm_gelu(*fresh))
    assert [list(launch.launchers) for launch in launches_of(ex)] == [[()]]


def test_the_programs_allocator_gives_dense_tensors_of_the_dtype_asked_for() -> None:
    from fusionlab.runtime.runnable import _empty_strided, allocator

    for empty in (allocator(torch.device("cpu")), functools.partial(_empty_strided, device=torch.device("cpu"))):
        made = empty((2, 3, 4), (12, 4, 1), torch.bfloat16)
        assert (made.shape, made.stride(), made.dtype, made.device.type) == ((2, 3, 4), (12, 4, 1), torch.bfloat16,
                                                                          "cpu")


def test_strides_of_an_extern_result_are_checked() -> None:
    # a flip's result follows its input's layout (transposed one call, row-major the next): its strides, read at run
    # time, must re-specialise the launch (a kernel specialised on stride 1 read the wrong elements)
    def flipped(x: torch.Tensor) -> torch.Tensor:
        return torch.flip(x.t(), [0]) * 2 + 1

    ex = fl.explore(flipped, torch.randn(6, 5))
    strides = [value for kernel in checked(ex).values() for role, value in kernel if role == "stride"]
    assert strides and set(strides) == {"flip"}, checked(ex)
    for fresh in (torch.randn(6, 5), torch.randn(5, 6).t(), torch.randn(6, 5)):
        torch.testing.assert_close(ex(fresh), flipped(fresh))


def test_a_convolution_result_is_made_as_traced_whatever_its_input() -> None:
    # a convolution's result follows its input's layout: traced channels-last, it is made channels-last (no copy when
    # it is), so kernels read it with strides known when the program is built, and an NCHW input the next call is
    # still right
    def conv(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.conv2d(x, w) * 2 + 1

    x, w = torch.randn(2, 4, 6, 6).to(memory_format=torch.channels_last), torch.randn(8, 4, 3, 3)
    ex = fl.explore(conv, x, w)
    assert "convolution.contiguous(memory_format=torch.channels_last)" in ex.generated.program.wrapper
    assert not [value for kernel in checked(ex).values() for role, value in kernel if role == "stride"]
    for fresh in (torch.randn(2, 4, 6, 6), torch.randn(2, 4, 6, 6).to(memory_format=torch.channels_last)):
        torch.testing.assert_close(ex(fresh, w), conv(fresh, w))


def test_an_unsafe_split_is_a_view_of_its_input_and_checked() -> None:
    # aten's unsafe_split returns views of its input though its schema names no alias: the caller's alignment
    def halves(x: torch.Tensor) -> torch.Tensor:
        a, b = torch.ops.aten.unsafe_split.Tensor(x, x.shape[1] // 2, 1)
        return a * 2 + b

    ex = fl.explore(halves, torch.randn(8, 16))
    (roles,) = checked(ex).values()
    assert {value for role, value in roles if role == "input"} == {"unsafe_split", "output_of"}, roles  # both halves
    misaligned = torch.randn(8 * 16 + 1)[1:].view(8, 16)
    torch.testing.assert_close(ex(misaligned), halves(misaligned))


@pytest.mark.gpu
def test_layouts_and_alignments_changing_between_calls_stay_right_on_the_gpu() -> None:
    # the direct launch re-specialises where an extern's result changes layout (a convolution of a channels-last
    # input, then of an NCHW one) and where an unsafe view of an input changes alignment
    needs_cuda()

    def conv(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.conv2d(x, w) * 2 + 1

    def halves(x: torch.Tensor) -> torch.Tensor:
        a, b = torch.ops.aten.unsafe_split.Tensor(x, x.shape[1] // 2, 1)
        return a * 2 + b

    w = torch.randn(8, 4, 3, 3, device="cuda")

    def image(channels_last: bool) -> torch.Tensor:
        x = torch.randn(2, 4, 6, 6, device="cuda")
        return x.to(memory_format=torch.channels_last) if channels_last else x

    ex = fl.explore(conv, image(True), w)
    for channels_last in (True, False, True, False):
        x = image(channels_last)
        torch.testing.assert_close(ex(x, w), conv(x, w))
    ex = fl.explore(halves, torch.randn(64, 128, device="cuda"))
    for offset in (0, 0, 1, 1, 0):
        x = torch.randn(64 * 128 + offset, device="cuda")[offset:].view(64, 128)
        torch.testing.assert_close(ex(x), halves(x))


def test_a_slice_of_an_extern_result_of_unknown_layout_is_checked() -> None:
    # flip's result follows its input's layout, so the slice's offset in bytes does too (16-byte aligned one call,
    # 8 bytes off the next); sort's values the same, through a multi-output extern
    def flipped(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.flip(x, [2])
        return y, y[1:] * 2

    def sorted_rows(x: torch.Tensor) -> torch.Tensor:
        return torch.sort(x, 2).values[1:] * 2

    for fn in (flipped, sorted_rows):
        ex = fl.explore(fn, torch.randn(3, 2, 2))
        (roles,) = checked(ex).values()
        assert any(role == "input" and ex.decomposed.graph[value].op == "slice" for role, value in roles), roles
        x = torch.randn(3, 2, 2).transpose(0, 1).contiguous().transpose(0, 1)
        torch.testing.assert_close(ex(x), fn(x))


def test_an_extern_that_may_return_its_input_is_checked() -> None:
    # dequantize of a float tensor returns the tensor itself, though its schema names no alias
    def dequantized(x: torch.Tensor) -> torch.Tensor:
        return x.dequantize() * 2 + 1

    ex = fl.explore(dequantized, torch.randn(8, 16))
    (roles,) = checked(ex).values()
    assert roles and roles[0][0] == "input", roles
    misaligned = torch.randn(8 * 16 + 1)[1:].view(8, 16)
    torch.testing.assert_close(ex(misaligned), dequantized(misaligned))


def test_results_of_ops_known_to_allocate_are_not_checked() -> None:
    from fusionlab.codegen.launch_checks import _allocates

    assert _allocates(torch.ops.aten.addmm.default) and _allocates(torch.ops.aten.convolution.default)
    assert _allocates(torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default)
    for op in (torch.ops.aten.dequantize.self, torch.ops.aten.unsafe_split.Tensor, torch.ops.aten.flip.default,
               torch.ops.aten.alias.default, torch.ops.aten._scaled_dot_product_attention_math.default,
               torch.ops.aten._convolution.deprecated):  # the last two: composed of other ops
        assert not _allocates(op), op


def test_a_config_whose_blocks_do_not_fit_steps_down_until_one_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel whose first config needs more shared memory than the GPU has (a pipelined loop over many operands:
    ResNet-50's batch-norm backward, channels-last, asked 256 KiB of an H200's 227) is launched with the next
    smaller blocks that fit, kept for later launches; a pinned config is not changed behind the caller's back."""
    from triton.runtime.errors import OutOfResources

    from fusionlab.runtime.config import BlockConfig, KernelShape
    from fusionlab.runtime.launch import KernelHandle

    handle = KernelHandle("k", "outer_reduction", "")
    tried: list[BlockConfig] = []

    def run(backend: str, config: BlockConfig, shape: KernelShape, args: tuple[Any, ...]) -> str:
        tried.append(config)
        if config.XBLOCK * config.RBLOCK > 32 * 64:
            raise OutOfResources(262144, 232448, "shared memory")
        return "compiled"

    monkeypatch.setattr(handle, "_run", run)
    shape = KernelShape("outer_reduction", 8192, 3136, False)
    config, compiled = handle._fitting(BlockConfig(32, 256, 8), shape, ())
    assert compiled == "compiled" and config == BlockConfig(32, 64, 8) and handle.tuned[shape] == config
    assert [c.RBLOCK for c in tried] == [256, 128, 64]
    assert BlockConfig(1, 16, 1).smaller(shape) is None
    assert BlockConfig(2, 16, 1).smaller(shape) == BlockConfig(1, 16, 1)
    # a persistent reduction holds its whole row: fewer rows, then fewer warps, never a shorter RBLOCK
    persistent = KernelShape("reduction", 4096, 1024, True)
    assert BlockConfig(2, 1024, 8).smaller(persistent) == BlockConfig(1, 1024, 8)
    assert BlockConfig(1, 1024, 8).smaller(persistent) == BlockConfig(1, 1024, 4)
    assert BlockConfig(1, 1024, 1).smaller(persistent) is None
    handle.tuned.clear()
    tried.clear()
    config, _ = handle._fitting(BlockConfig(4, 1024, 8), persistent, ())
    assert config == BlockConfig(2, 1024, 8) and all(c.RBLOCK == 1024 for c in tried)
    handle.pin(BlockConfig(32, 256, 8))
    with pytest.raises(OutOfResources):
        handle._fitting(BlockConfig(32, 256, 8), shape, ())
