"""TorchInductor beside fusionlab: its kernels, the aten ops in each, and why it did not fuse.

This is the one module that touches Inductor's private API (its config, `run_and_get_code`, the scheduler's
`WhyNoFuse` records on the `torch._inductor.scheduler.__fusion` logger, and the comments and metadata in
its generated code). Tested against the installed torch; written for torch 2.11 to 2.14.

    >>> view = inductor_view(lambda x: torch.softmax(x, -1), (torch.randn(64, 256),))
    >>> [kernel.name for kernel in view.kernels]
    ['cpp_fused__softmax_0']
"""

from __future__ import annotations

import contextlib
import functools
import io
import logging
import re
import shutil
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any, Literal
from unittest import mock

import torch

from fusionlab.inductor.matching import InductorNode, NodeMatch, match_graph, op_name
from fusionlab.inductor.records import (
    CapturedNodes,
    InductorDecision,
    InductorKernel,
    InductorOperation,
    InductorView,
    captured_nodes,
    captured_pairs,
    match_nodes,
)
from fusionlab.measure.timing import device_of

__all__ = [
    "InductorDecision",
    "InductorKernel",
    "InductorView",
    "compile_inductor",
    "inductor_view",
    "parse_program",
    "warm_up_inductor",
]

_FUSION_LOGGER = "torch._inductor.scheduler.__fusion"


# ---- running Inductor -----------------------------------------------------------------------------------


def inductor_view(
    fn: Callable[..., Any],
    inputs: tuple[Any, ...],
    *,
    captured_node_names: CapturedNodes | None = None,
    cpu_backend: Literal["cpp", "triton"] = "cpp",
) -> InductorView:
    """Compile `fn` with Inductor (caches off) and collect its kernels and fusion decisions.

    `captured_node_names` names the aten nodes of our captured graph, in graph order: a mapping from node
    name to aten target (`{"add": "aten.add.Tensor"}`), objects with `.name` and `.target`, or bare names
    (`"mul_1"`, whose op is read off the name). Each scheduler operation (`op3`) records the nodes of Inductor's
    graph it computes; those are matched onto ours by the rules of `fusionlab.inductor.matching` (`view.matches`
    says which rule, or "unmatched"), and each kernel covers the nodes of its operations. Where this torch records
    no operations, a kernel's aten ops are matched onto our nodes by op and order instead.
    On a CPU, `cpu_backend="triton"` asks for Triton source instead of C++: generated, not run.
    Resets Dynamo (`torch._dynamo.reset()`), so other compiled functions recompile on their next call.
    """
    from torch._inductor import config
    from torch._inductor.utils import run_and_get_code

    device = device_of(fn, inputs)
    generate_only = device.type == "cpu" and cpu_backend == "triton"
    if cpu_backend not in ("cpp", "triton"):
        raise ValueError(f"cpu_backend must be 'cpp' or 'triton', got {cpu_backend!r}")
    settings: dict[str, Any] = {
        "force_disable_caches": True,  # with the FX graph cache on, the scheduler does not run
        "benchmark_kernel": True,  # puts kernel_num_gb and kernel_flop into each Triton kernel
        "debug_fusion": True,  # "# Fused node name list: op0, op2" before each Triton launch
        "cpp.descriptive_names": "original_aten",
        "triton.descriptive_names": "original_aten",
    }
    recorder = _SchedulerRecorder(getattr(config, "_pre_fusion_custom_pass", None))
    if hasattr(config, "_pre_fusion_custom_pass"):  # the scheduler's hook before fusion, torch >= 2.5
        settings["_pre_fusion_custom_pass"] = recorder
    collector = _FusionCollector(recorder)
    codes: list[str] = []
    with contextlib.ExitStack() as stack:
        if generate_only:
            settings.update({"cpu_backend": "triton", "compile_threads": 1})
            stack.enter_context(_without_triton_driver())
        stack.enter_context(config.patch(settings))
        stack.enter_context(_quiet_compile())
        stack.enter_context(collector)
        stack.enter_context(torch.no_grad())
        compiled = torch.compile(fn, backend="inductor", dynamic=False)
        if generate_only:
            codes = _generate_code(compiled, inputs)
        else:
            _, codes = run_and_get_code(compiled, *inputs)
    if not codes:
        raise RuntimeError(
            f"Inductor produced no code for {getattr(fn, '__name__', type(fn).__name__)}: "
            "the function may have no tensor operations, or Dynamo fell back to eager"
        )
    kernels: list[InductorKernel] = []
    graph_of_kernel: list[int] = []
    launches = 0
    for index, code in enumerate(codes):
        parsed, count, _ = _parse_wrapper(code)
        # A graph break gives several graphs, whose kernel numbering restarts: tell them apart.
        kernels.extend(replace(k, name=f"{k.name}@graph{index}") if index else k for k in parsed)
        graph_of_kernel.extend([index] * len(parsed))
        launches += count
    operations: tuple[InductorOperation, ...] = ()
    matches: tuple[NodeMatch, ...] = ()
    if captured_node_names is not None:
        ours = captured_nodes(captured_node_names)
        by_order = match_nodes(kernels, captured_pairs(captured_node_names))
        if recorder.graphs:
            operations, matches = _operations_matched(recorder, ours)
            kernels = _kernels_with_nodes(kernels, graph_of_kernel, operations, by_order, [n.name for n in ours])
        else:
            kernels = by_order
    return InductorView(
        kernels=tuple(kernels),
        decisions=collector.decisions(),
        wrapper_source="\n\n".join(codes),
        device=str(device),
        launches=launches,
        generated_only=generate_only,
        operations=operations,
        matches=matches,
    )


def compile_inductor(fn: Callable[..., Any], inputs: tuple[Any, ...]) -> tuple[Callable[..., Any], float]:
    """`torch.compile(fn)` with Inductor, compiled cold (caches off) by one call on `inputs`.

    Returns the compiled callable and the seconds that first call took (compilation plus one run).
    Resets Dynamo first, so earlier compilations cannot be reused.
    """
    from torch._inductor import config

    device = device_of(fn, inputs)
    torch._dynamo.reset()
    with config.patch({"force_disable_caches": True}), _quiet_compile(), torch.no_grad():
        compiled = torch.compile(fn, backend="inductor", dynamic=False)
        start = time.perf_counter()
        compiled(*inputs)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        seconds = time.perf_counter() - start
    return compiled, seconds


def parse_program(code: str, captured_node_names: CapturedNodes | None = None, *,
                  per_call: bool = False) -> tuple[InductorKernel, ...]:
    """The kernels and extern calls of one program Inductor generated (a wrapper's source, as
    `run_and_get_code` returns it), in launch order, matched onto our captured nodes when they are given
    (as `inductor_view` does). Used by `fusionlab.profile` to attribute a profiled kernel to our modules.

    `per_call=True` gives one entry per launch instead of one per kernel: Inductor launches one kernel for every
    identical layer, and each launch then takes its own layer's nodes."""
    kernels, _, calls = _parse_wrapper(code)
    if per_call:
        kernels = calls
    if captured_node_names is not None:
        kernels = match_nodes(kernels, captured_pairs(captured_node_names))
    return tuple(kernels)


def warm_up_inductor(device: str | torch.device = "cpu") -> None:
    """Compile a one-op function once, so that later cold compile times leave out the import cost."""
    compile_inductor(lambda x: x + 1, (torch.ones(8, device=device),))


def _generate_code(compiled: Callable[..., Any], inputs: tuple[Any, ...]) -> list[str]:
    """Generate (not run) Inductor's code: the wrapper is saved before its kernels fail to load."""
    from torch._inductor.graph import GraphLowering

    codes: list[str] = []
    torch._dynamo.reset()
    with mock.patch.object(GraphLowering, "save_output_code", codes.append):
        try:
            compiled(*inputs)
        except Exception:
            if not codes:
                raise
    return codes


@contextlib.contextmanager
def _without_triton_driver() -> Iterator[None]:
    """Let Inductor's Triton codegen run on a machine with no GPU: it only wants a hash of the backend.

    The kernels then fail to load, and Inductor keeps its temporary cache folder "on error": remove it.
    """
    import torch.utils._triton as triton_utilities

    def discard_kept_folder(record: logging.LogRecord) -> bool:
        if str(record.msg).startswith("on error, temporary cache dir kept at") and record.args:
            folder = record.args[0] if isinstance(record.args, tuple) else None
            if folder:
                shutil.rmtree(str(folder), ignore_errors=True)
            return False
        return True

    logger = logging.getLogger("torch._inductor.utils")
    logger.addFilter(discard_kept_folder)
    try:
        with mock.patch.object(triton_utilities, "triton_hash_with_backend", lambda: "CPU"):
            yield
    finally:
        logger.removeFilter(discard_kept_folder)


@contextlib.contextmanager
def _quiet_compile() -> Iterator[None]:
    """Drop the notes Inductor prints under these settings; pass everything else through."""
    buffer = io.StringIO()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*force disabled by torch.compiler.config")
        try:
            with contextlib.redirect_stderr(buffer):
                yield
        finally:
            lines = buffer.getvalue().splitlines(True)
            sys.stderr.write("".join(line for line in lines if not line.startswith("Compiled module path")))


# ---- the scheduler's operations and the graph nodes they came from ---------------------------------------

_Operation = tuple[str, str, tuple[str, ...], tuple[InductorNode, ...]]  # name, kind, buffers, origins


class _SchedulerRecorder:
    """Inductor's hook before fusion (`config._pre_fusion_custom_pass`): records each scheduler operation (`op3`),
    the buffers it writes and the nodes of Inductor's graph it computes, then hands the nodes on unchanged (to
    the user's own pass, when one was set). One call per graph Inductor schedules."""

    def __init__(self, chained: Callable[[list[Any]], list[Any]] | None) -> None:
        self.graphs: list[list[_Operation]] = []
        self.positions: list[dict[str, int]] = []  # per graph: each node's place in Inductor's graph
        self._chained = chained

    def __call__(self, nodes: list[Any]) -> list[Any]:
        graph = len(self.graphs)
        positions: dict[Any, dict[Any, int]] = {}
        operations: list[_Operation] = []
        for node in nodes:
            for leaf in node.get_nodes():
                operations.append(_operation_record(leaf, graph, positions))
        self.graphs.append(operations)
        self.positions.append({str(n.name): i for order in positions.values() for n, i in order.items()})
        return self._chained(nodes) if self._chained is not None else nodes


def _operation_record(leaf: Any, graph: int, positions: dict[Any, dict[Any, int]]) -> _Operation:
    ir_node = getattr(leaf, "node", None)
    origins: Any = ()
    if ir_node is not None:
        origins = ir_node.get_origins() if hasattr(ir_node, "get_origins") else getattr(ir_node, "origins", ())
    try:
        buffers = tuple(str(buffer.get_name()) for buffer in leaf.get_outputs())
    except (AttributeError, TypeError):
        buffers = ()

    def position(node: Any) -> int:
        order = positions.setdefault(node.graph, {n: i for i, n in enumerate(node.graph.nodes)})
        return order.get(node, len(order))

    ordered = sorted((o for o in origins if getattr(o, "op", "") == "call_function"), key=position)
    nodes = tuple(
        InductorNode(str(o.name), op_name(o.target), op_name(o.meta.get("original_aten", o.target)),
                     _pre_grad_name(o), graph)
        for o in ordered
    )
    return str(leaf.get_name()), type(leaf).__name__, buffers, nodes


def _pre_grad_name(node: Any) -> str:
    """The node of Dynamo's graph this one came from (`meta["from_node"]`), which tells one layer_norm call's
    decomposed nodes from another's; "" when this torch does not record it."""
    sources = node.meta.get("from_node") or ()
    first = sources[0] if sources else None
    if first is None:
        return ""
    if hasattr(first, "name"):
        return str(first.name)
    return str(first[0]) if isinstance(first, tuple) and first else ""


def _operations_matched(recorder: _SchedulerRecorder, ours: list[Any]) -> tuple[
        tuple[InductorOperation, ...], tuple[NodeMatch, ...]]:
    """Every operation with the our nodes its origins match, and each origin's match (in Inductor's graph order)."""
    graphs = recorder.graphs
    theirs: dict[tuple[int, str], InductorNode] = {}
    for operations in graphs:
        for *_, origins in operations:
            for origin in origins:
                theirs.setdefault((origin.graph, origin.name), origin)
    ordered = sorted(theirs.values(), key=lambda n: (n.graph, recorder.positions[n.graph].get(n.name, 0)))
    matches = match_graph(ordered, ours)
    found = {(m.graph, m.inductor): m.ours for m in matches}
    our_order = {node.name: index for index, node in enumerate(ours)}
    records = []
    for graph, operations in enumerate(graphs):
        computed: set[str] = set()  # origins of the generated kernels so far: an extern call's inputs, not its work
        for name, kind, buffers, origins in operations:
            if kind.startswith("Extern"):
                origins = tuple(o for o in origins if o.name not in computed) or origins
            else:
                computed.update(o.name for o in origins)
            mine = {found[(graph, o.name)] for o in origins if found.get((graph, o.name))}
            records.append(InductorOperation(
                name=f"{name}@graph{graph}" if graph else name,
                kind=kind,
                buffers=buffers,
                origins=tuple(o.name for o in origins),
                nodes=tuple(sorted((n for n in mine if n is not None), key=our_order.__getitem__)),
                unmatched=tuple(o.name for o in origins if found.get((graph, o.name)) is None),
                graph=graph,
            ))
    return tuple(records), matches


def _kernels_with_nodes(kernels: list[InductorKernel], graphs: list[int], operations: tuple[InductorOperation, ...],
                        fallback: list[InductorKernel], ours: list[str]) -> list[InductorKernel]:
    """Each kernel with the our nodes of its operations: those in the fused-node list before its launch (Triton),
    else those whose buffers its launch names first (C++ kernels and extern calls, in launch order); plus those of
    our nodes that no Inductor node matches and whose op the kernel lists (`fallback`, by op and order). A kernel
    whose operations are unknown keeps the `fallback` match."""
    position = {name: index for index, name in enumerate(ours)}
    matched = {node for op in operations for node in op.nodes}
    claimed: set[tuple[int, str]] = set()  # (graph, operation) already placed in an earlier kernel
    result = []
    for kernel, graph, by_order in zip(kernels, graphs, fallback, strict=True):
        in_graph = {op.name.split("@")[0]: op for op in operations if op.graph == graph}
        names = [name for name in kernel.scheduler_nodes if name in in_graph]
        if not names:
            names = [name for name, op in in_graph.items() if (graph, name) not in claimed
                     and op.buffers and set(op.buffers) <= set(kernel.buffers)]
        claimed.update((graph, name) for name in names)
        if not names:
            result.append(by_order)
            continue
        mine = [in_graph[name] for name in names]
        # Our nodes no Inductor node matches, whose op this kernel lists ("listed op": addmm covers our mm).
        nodes = {node for op in mine for node in op.nodes} | {n for n in by_order.node_names if n not in matched}
        unmatched = tuple(dict.fromkeys(node for op in mine for node in op.unmatched))
        result.append(replace(kernel, node_names=tuple(sorted(nodes, key=position.__getitem__)),
                              scheduler_nodes=tuple(names), unmatched=unmatched))
    return result


class _FusionCollector(logging.Handler):
    """Turns the scheduler's fusion log into records: `WhyNoFuse` objects and "fusing %s with %s" lines.

    The logger is switched on directly rather than through `torch._logging.set_logs(fusion=True)`, which
    would reset the user's other log settings and also print every record to stderr.
    """

    def __init__(self, recorder: _SchedulerRecorder) -> None:
        super().__init__(level=logging.DEBUG)
        self._records: list[InductorDecision] = []
        self._recorder = recorder  # the graph being scheduled: decisions come after its operations are recorded
        self._saved: tuple[int, bool] = (logging.NOTSET, True)

    def emit(self, record: logging.LogRecord) -> None:
        message: Any = record.msg
        if all(hasattr(message, field) for field in ("name1", "name2", "reason")):
            arguments = tuple(getattr(message, "args", ()) or ())
            reason = str(message.reason)
            with contextlib.suppress(TypeError, ValueError):
                reason = reason % arguments if arguments else reason
            self._records.append(InductorDecision(str(message.name1), str(message.name2), reason, False, self._graph()))
        elif message == "fusing %s with %s" and isinstance(record.args, tuple) and len(record.args) == 2:
            self._records.append(InductorDecision(str(record.args[0]), str(record.args[1]), "fused", True,
                                                  self._graph()))

    def _graph(self) -> int:
        return max(len(self._recorder.graphs) - 1, 0)

    def decisions(self) -> tuple[InductorDecision, ...]:
        # The scheduler repeats some checks: keep the first of each.
        return tuple(dict.fromkeys(self._records))

    def __enter__(self) -> _FusionCollector:
        logger = logging.getLogger(_FUSION_LOGGER)
        self._saved = (logger.level, logger.propagate)
        logger.addHandler(self)
        logger.setLevel(logging.DEBUG)
        logger.propagate = False
        return self

    def __exit__(self, *exception: object) -> None:
        logger = logging.getLogger(_FUSION_LOGGER)
        logger.removeHandler(self)
        logger.setLevel(self._saved[0])
        logger.propagate = self._saved[1]


# ---- reading the generated code -------------------------------------------------------------------------

_DEFINITION = re.compile(
    r"^(?P<name>\w+) = async_compile\.(?P<kind>triton|cpp_pybinding|cpp)\([^\n]*?r?'''\n?(?P<body>.*?)'''",
    re.MULTILINE | re.DOTALL,
)
_ORIGINAL_ATEN = re.compile(r"Original ATen: \[(?P<ops>[^\]]*)\]")
_FUSED_NODES = re.compile(r"# Fused node name list: (?P<names>.*)")
_EXTERN_CALL = re.compile(r"\b(?:extern_kernels\.(?P<extern>\w+)|torch\.ops\.aten\.(?P<fallback>\w+)\.\w+)\(")
# Inductor rewrites mm + add into addmm: its extern call covers our mm node too.
_EXTERN_ALIASES: dict[str, tuple[str, ...]] = {
    "addmm": ("mm",),
    "baddbmm": ("bmm",),
    "_addmm_activation": ("mm",),
}
_BUFFER = re.compile(r"\bbuf\d+\b")
_NUM_GB = re.compile(r"'kernel_num_gb': (?P<value>[0-9.eE+-]+)")
_FLOP = re.compile(r"'kernel_flop': (?P<value>[0-9]+)")


def _parse_wrapper(code: str) -> tuple[list[InductorKernel], int, list[InductorKernel]]:
    """The kernels of one wrapper module, in launch order, the number of launches per call, and every launch in
    order (a kernel launched for several layers once for each)."""
    definitions: dict[str, InductorKernel] = {}
    for match in _DEFINITION.finditer(code):
        name, body = match["name"], match["body"]
        language = "triton" if match["kind"] == "triton" else "cpp"
        comments = _comment_block_before(code, match.start())
        ops = _ops_from_comment(comments) if language == "triton" else ()
        if not ops:
            ops = _ops_from_name(name)
        num_gb, flops = _NUM_GB.search(body), _FLOP.search(body)
        definitions[name] = InductorKernel(
            name=name,
            source=_trim_harness(body) if language == "triton" else body,
            language=language,
            aten_ops=ops,
            node_names=(),
            num_gb=float(num_gb["value"]) if num_gb else None,
            flops=int(flops["value"]) if flops else None,
        )
    program = _DEFINITION.sub("", code)
    ordered: dict[str, InductorKernel] = {}
    launches = 0
    pending_nodes: tuple[str, ...] = ()
    pending_ops: tuple[str, ...] = ()
    extern_comments: dict[str, tuple[str, ...]] = {}
    calls: list[tuple[str, InductorKernel | None]] = []  # (name, the launch's own record; None: an extern's)
    for line in _call_body(program):
        stripped = line.strip()
        fused = _FUSED_NODES.search(stripped)
        if fused:
            pending_nodes = tuple(name.strip() for name in fused["names"].split(","))
            continue
        if stripped.startswith("#"):
            pending_ops = _ops_from_comment(stripped) or pending_ops
            continue
        launched = re.match(r"(?:\w+ = )?(?P<name>\w+)(?:\.run)?\(", stripped)
        if launched and launched["name"] in definitions:
            name = launched["name"]
            launches += 1
            launch = replace(definitions[name], scheduler_nodes=pending_nodes,
                             buffers=tuple(_BUFFER.findall(stripped)))
            ordered.setdefault(name, launch)
            calls.append((name, launch))
            pending_nodes = ()
            continue
        extern = _EXTERN_CALL.search(stripped)
        if extern:
            op = extern["extern"] or extern["fallback"]
            launches += 1
            name = f"extern_{op}_{sum(k.language == 'extern' for k in ordered.values())}"
            ops = (op, *_EXTERN_ALIASES.get(op, ()))
            ordered[name] = InductorKernel(name, stripped, "extern", ops, (), None, None,
                                           buffers=tuple(_BUFFER.findall(stripped)))
            extern_comments[name] = pending_ops
            calls.append((name, None))
        if not stripped.startswith("del "):
            pending_ops = ()
    for name, kernel in definitions.items():  # defined but never launched: keep, at the end
        ordered.setdefault(name, kernel)
    # The comment above an extern call also names the ops of its inputs' producers: keep only the ops
    # that no generated kernel claims (the add that addmm absorbed, say).
    claimed = {op for kernel in ordered.values() if kernel.language != "extern" for op in kernel.aten_ops}
    for name, ops in extern_comments.items():
        extra = tuple(op for op in ops if op not in claimed and op not in ordered[name].aten_ops)
        ordered[name] = replace(ordered[name], aten_ops=ordered[name].aten_ops + extra)
    return list(ordered.values()), launches, [launch or ordered[name] for name, launch in calls]


def _call_body(program: str) -> list[str]:
    """The lines of the wrapper's `call` function (a method of `Runner` in newer torch)."""
    match = re.search(r"^(?P<indent>[ \t]*)def call\((?:self, )?args\):\n", program, re.MULTILINE)
    if match is None:
        return []
    lines = []
    for line in program[match.end() :].splitlines():
        if line.strip() and len(line) - len(line.lstrip()) <= len(match["indent"]):
            break
        lines.append(line)
    return lines


def _comment_block_before(code: str, position: int) -> str:
    lines = code[:position].rstrip("\n").splitlines()
    block: list[str] = []
    for line in reversed(lines):
        if not line.startswith("#"):
            break
        block.append(line)
    return "\n".join(reversed(block))


def _ops_from_comment(comments: str) -> tuple[str, ...]:
    match = _ORIGINAL_ATEN.search(comments)
    if match is None:
        return ()
    ops = (op.strip() for op in match["ops"].split(","))
    return tuple(op.removeprefix("aten.") for op in ops if op)


def _ops_from_name(kernel_name: str) -> tuple[str, ...]:
    """Aten ops from a descriptive kernel name: `cpp_fused__softmax_add_0` -> ("_softmax", "add")."""
    match = re.match(r"^(?:cpp|triton_\w{3})_fused_(?P<ops>.+?)_\d+$", kernel_name)
    if match is None:
        return ()
    return _split_op_names(match["ops"])


@functools.cache
def _aten_op_names() -> frozenset[str]:
    names = torch._C._dispatch_get_all_op_names()
    return frozenset(name[len("aten::") :].split(".")[0] for name in names if name.startswith("aten::"))


@functools.cache
def _split_op_names(joined: str) -> tuple[str, ...]:
    """Split names joined by "_" (names may hold "_" too) into the fewest known aten op names."""
    known = _aten_op_names()
    best: list[tuple[str, ...] | None] = [None] * (len(joined) + 2)
    best[0] = ()
    for start in range(len(joined) + 1):
        found = best[start]
        if found is None:
            continue
        for end in range(start + 1, len(joined) + 1):
            word = joined[start:end]
            if word in known and (end == len(joined) or joined[end] == "_"):
                step = end + 1 if end < len(joined) else end
                candidate = (*found, word)
                current = best[step]
                if current is None or len(candidate) < len(current):
                    best[step] = candidate
    return best[len(joined)] or ()


def _trim_harness(source: str) -> str:
    """Drop the benchmark harness that `benchmark_kernel=True` appends (and, on a CPU, misindents)."""
    kernel = source.split("\n\ndef get_args():")[0]
    lines = kernel.splitlines()
    first = next((i for i, line in enumerate(lines) if line.startswith("@")), 0)
    preamble = [line for line in lines[:first] if not line[:1].isspace()]
    return "\n".join(preamble + lines[first:]).rstrip() + "\n"




