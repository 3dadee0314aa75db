"""`torch.compile(model, backend="fusionlab")`: Dynamo captures, AOTAutograd splits forward and backward, and
each aten graph runs through fusionlab's pipeline.

    >>> compiled = torch.compile(torch.nn.functional.gelu, backend="fusionlab")
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch._dynamo.backends.common import aot_autograd
from torch._dynamo.backends.registry import register_backend

from fusionlab.capture import fill_template
from fusionlab.explore import Exploration, explore

#: the graphs compiled through the backend, newest last (the latest 64), for inspection in a notebook
explorations: deque[Exploration] = deque(maxlen=64)


def _real(value: Any) -> Any:
    """Dynamo hands fake tensors to the compiler: fusionlab traces real (uninitialised) stand-ins."""
    if not isinstance(value, torch.Tensor):
        return value
    shape = [int(s) for s in value.shape]
    strides = [int(s) for s in value.stride()]
    return torch.empty_strided(shape, strides, dtype=value.dtype, device=value.device)


def compile_graph(graph_module: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable[..., Any]:
    """Compile one aten graph (forward or backward) into fusionlab kernels."""
    from functorch.compile import make_boxed_func
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    # Trace with fusionlab's own fake mode, not Dynamo's (symbolic) one.
    with torch._guards.tracing(None), unset_fake_temporarily():
        ex = explore(graph_module, *[_real(v) for v in example_inputs])
        ex.compiled  # noqa: B018 - generate and build now, not inside the first training step
        # Tensors the graph holds itself (constants made inside the function: `b[:, 0] = 0`'s zero) lead its
        # inputs.
        held = ex.captured.result.state.named() if ex.captured.result.state is not None else {}
        constants = [held[spec.name][0].detach() for spec in ex.captured.result.inputs if spec.kind != "input"]
    explorations.append(ex)

    def run(*args: Any) -> Any:
        outputs = iter(ex.run_flat(constants + [a for a in args if isinstance(a, torch.Tensor)]))
        return fill_template(ex.captured.result.output_template, outputs)

    return make_boxed_func(run)  # type: ignore[no-any-return]


backend = aot_autograd(fw_compiler=compile_graph, bw_compiler=compile_graph)
register_backend(name="fusionlab")(backend)
