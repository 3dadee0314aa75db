"""CUDA graphs: a program's launches captured once per input layout and replayed with one call.

A replay issues every kernel of a call in one `cudaGraphLaunch`, so the host's per-launch Python (about 36 µs a
launch on the H200 host for BERT) is paid once, at capture. What that needs, and what this module does:
- static input buffers: the captured kernels read fixed addresses, so each call's inputs are copied into buffers
  made at capture (one `torch._foreach_copy_`). Parameters (and inputs the caller names in `static=`, and outputs of
  another graph that stay its memory: outputs handed out uncopied, a forward's saved activations) are read in place
  instead; a call that brings one of those at another address captures again. A model's logits handed to its loss's
  graph, and the loss's gradient handed back to the model's backward, are read where they lie (copying them cost
  GPT-2's training step 0.8 ms of GPU time on an H100: docs/PERFORMANCE.md, round 23); once their graph copies them
  (its caller held them past a call), the graph reading them copies them into a buffer too, captured again.
- one capture per input layout (shapes, strides, dtypes): a new batch size captures a new graph, at most
  `max_graphs` per function (then the call is refused, as a sign of sizes that never settle).
- warm-up before capture, on a side stream: the first calls compile the kernels, pick launchers and let cuBLAS make
  its workspace, none of which may happen while a stream is capturing.
- a private memory pool per function, shared by its layouts (they never run at the same time); a capture after all
  its graphs were dropped takes a new one.
- outputs: the graph writes its outputs to the same memory on every replay. By default (`clone_outputs=True`)
  results of an earlier call stay as they were: each output is handed out as the graph's memory, and one that the
  caller still holds at the next call (a loss kept for printing, gradients accumulated over steps) is copied on
  every call from then on (one more read and write of its bytes), by a graph captured again, since the first one
  writes the memory the caller holds. What is let go before the next call (a backward's gradients, taken by
  autograd and dropped by `zero_grad`; logits once the loss is computed) is never copied (with every output copied,
  GPT-2's training step took 12.1 ms of GPU time on an H100, 11.1 without those copies: docs/PERFORMANCE.md, round
  22). With `clone_outputs=False` the outputs are that memory itself, overwritten by the next call, as Inductor's
  `mode="reduce-overhead"` does: read them (or `.clone()` them) before the next call. Each replay then
  bumps the outputs' version counters, so autograd refuses a backward whose saved activations a second forward
  overwrote ("modified by an inplace operation") instead of computing with them.
- random ops (dropout): the RNG state is put back after warm-up and capture, so that the first replay draws what an
  eager call would have drawn from the same seed; each replay then advances the generator as an eager call does.
- inputs the function writes (`writes`: the new value of input i is output j, as a batch norm's running statistics
  are): written into an input read in place (a parameter, a buffer, a static position) by the graph itself, at the end
  of each replay, as eager's in-place update; into a copied input, after the replay (one `torch._foreach_copy_` per
  dtype for all of them), their version counters bumped as an in-place op's are. Those outputs are handed out
  uncopied, like the saved activations below.
- a training step's saved activations (`kept_from`: the forward graph's outputs from that position on, which only its
  backward graph reads): copying them out and back in on every step cost ResNet-50 8 ms of a 25 ms step on an H200.
  They are handed out as the graph's memory instead, and the backward graph reads them where they lie. Safe without
  a copy because the next replay checks first that nothing but the graph holds that memory any more (autograd frees
  the activations when the backward has run). The check counts references to the memory's storage, so a view or a
  detached alias of a handed tensor holds it too. Two forwards before one backward (gradients accumulated over
  micro-batches), or a graph kept with `retain_graph=True`, make the next call run without the graph (`bypassed`),
  on fresh memory; so does a backward graph handed activations that such a call made.

    >>> graphed = CudaGraphs(runnable, static=range(n_parameters))
    >>> outputs = graphed(*tensors)          # doctest: +SKIP
    >>> graphed.captures, graphed.replays    # doctest: +SKIP
    (1, 1)
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

__all__ = ["CUDAGRAPH_MODES", "CudaGraphs", "CudaGraphsError", "copy_all", "cudagraph_mode", "lasting", "refuse_cpu",
           "write_inputs"]

# Memory that stays put between calls, by data address: parameters a graph read in place, outputs handed out as
# a graph's memory, and a forward's saved activations. Another graph reads an input found here in place too (a
# backward graph reads the weights its forward read and the activations its forward saved where they lie; a loss
# graph reads the logits its model's graph handed out, and the model's backward the gradient the loss's backward
# handed out). Weak references: memory freed and reused by a new tensor is not taken for the old one. The flag:
# memory that may move (a handed output, which its graph copies from the call its caller holds it on).
_lasting: dict[int, tuple[weakref.ref[torch.Tensor], bool]] = {}


def _remember(tensors: Iterable[torch.Tensor], movable: bool = False) -> None:
    for tensor in tensors:
        _lasting[tensor.data_ptr()] = (weakref.ref(tensor), movable)


def lasting(address: int) -> bool:
    """Whether `address` is where a parameter or a graph's handed-out output, still alive, keeps its data."""
    return _lasting_entry(address) is not None


def _lasting_entry(address: int) -> tuple[weakref.ref[torch.Tensor], bool] | None:
    entry = _lasting.get(address)
    tensor = entry[0]() if entry is not None else None
    if tensor is None or tensor.data_ptr() != address:
        _lasting.pop(address, None)
        return None
    return entry


def movable(address: int) -> bool:
    """Whether `address` is a graph's handed-out output, which moves to fresh memory on every call once its graph
    copies it (its caller held it past a call)."""
    entry = _lasting_entry(address)
    return entry is not None and entry[1]


#: what `cudagraphs=` takes: off, on with earlier results kept as they were (the default when on), or on with outputs
#: overwritten by the next call (Inductor's reduce-overhead semantics, no copy)
CUDAGRAPH_MODES = (False, True, "overwrite")


def cudagraph_mode(value: Any) -> bool | str:
    """`value` checked as a `cudagraphs=` option."""
    if not any(value is mode or (isinstance(mode, str) and value == mode) for mode in CUDAGRAPH_MODES):
        raise ValueError(f"cudagraphs={value!r} is not an option: pass False, True (results of earlier calls stay "
                         "as they were) or 'overwrite' (outputs are the graph's memory, overwritten by the next call: "
                         "read them first)")
    return value  # type: ignore[no-any-return]


class CudaGraphsError(RuntimeError):
    """`cudagraphs=True` cannot run this call: the message names what was given and what to do."""


def refuse_cpu(tensors: Iterable[Any], what: str) -> None:
    """Refuse `cudagraphs=True` for inputs that hold no CUDA tensor (CUDA graphs exist only on CUDA devices)."""
    devices = {t.device.type for t in tensors if isinstance(t, torch.Tensor)}
    if devices and "cuda" not in devices:
        raise CudaGraphsError(f"cudagraphs=True needs CUDA tensors: {what} are on {', '.join(sorted(devices))}. "
                              "Move the model and inputs to a CUDA device (.to('cuda')), or leave cudagraphs off "
                              "(on a CPU the kernels run under Triton's interpreter, where a graph saves nothing)")


def _layout(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return (value.shape, value.stride(), value.dtype)
    return (type(value), value)  # (True is not 1 here, as the C++ check's path has it)


def layout_guard(tensors: Sequence[torch.Tensor]) -> Callable[..., bool] | None:
    """A check, in one C++ call, that tensors have the sizes, strides, dtype and device of `tensors` (and their
    requires_grad and dispatch keys: Dynamo's tensor guards, which it ran per call in torch 2.0). What it passes,
    `_layout` equality passes too; what it fails is checked again in Python. None where torch has no such check."""
    try:
        from torch._C._dynamo.guards import TensorGuards

        build: Any = TensorGuards  # (its stub lacks the names torch's C++ asks for)
        guards = build(*tensors, tensor_check_names=[f"input{i}" for i in range(len(tensors))],
                       dynamic_dims_sizes=[list(t.shape) for t in tensors],
                       dynamic_dims_strides=[list(t.stride()) for t in tensors])
    except (ImportError, TypeError, RuntimeError, SystemError):
        return None
    return guards.check  # type: ignore[no-any-return]


@dataclass
class _Graph:
    """One captured layout: the graph, the buffers it reads and writes, which inputs it reads in place."""

    graph: torch.cuda.CUDAGraph
    inputs: list[Any]  # the copied positions' buffers and the parameters read in place (None: other tensors)
    copied: tuple[int, ...]  # positions copied into a buffer on every call
    in_place: tuple[tuple[int, int], ...]  # (position, data address) read where they lie
    checked: tuple[tuple[int, Any], ...]  # (position, layout) of the in-place inputs that are not parameters
    outputs: tuple[torch.Tensor, ...]
    cloned: tuple[int, ...] = ()  # the outputs copied out of the graph's memory on every call
    kept: tuple[_Storage, ...] = ()  # the graph memory the other outputs are handed out on (`kept_from`, `handed`)
    host_writes: tuple[tuple[int, int], ...] = ()  # (input, output) written after each replay (a copied input)
    graph_writes: tuple[int, ...] = ()  # inputs read in place that the replay writes (their versions are bumped)
    # the positions a call's layouts are compared at (keyed tensors, then `checked`), in one C++ check where torch
    # has one (`layout_guard`), and the keyed values that are no tensors
    guarded: tuple[int, ...] = ()
    guard: Callable[..., bool] | None = None
    values: tuple[tuple[int, Any], ...] = ()
    # `in_place` as torch's C++ check takes it: every position's address (None: not read in place), the positions
    addresses: list[int | None] = field(init=False)
    positions: list[int] = field(init=False)

    def __post_init__(self) -> None:
        self.addresses = [None] * len(self.inputs)
        for position, address in self.in_place:
            self.addresses[position] = address
        self.positions = [position for position, _ in self.in_place]

    def fits(self, tensors: list[Any]) -> bool:
        """A call this graph replays for, by the fast check alone (False: ask the Python comparison)."""
        return self.guard is not None and all(type(tensors[i]) is type(value) and tensors[i] == value
                                              for i, value in self.values) \
            and self.guard(*[tensors[i] for i in self.guarded]) and self.reads(tensors)

    def reads(self, tensors: list[Any]) -> bool:
        """Whether the inputs read in place are at the addresses captured (one C++ call where torch has it)."""
        if _addresses_equal is not None:
            return bool(_addresses_equal(tensors, self.addresses, self.positions))
        return all(tensors[i].data_ptr() == address for i, address in self.in_place)


# torch's check of data addresses at positions, in C++ (CUDA builds; Inductor's CUDA graphs use it per replay)
_addresses_equal = getattr(torch._C, "_tensors_data_ptrs_at_indices_equal", None)


def copy_all(destinations: Sequence[torch.Tensor], sources: Sequence[torch.Tensor]) -> None:
    """`torch._foreach_copy_` per dtype and device: its fused kernels take lists of one dtype (mixed lists, a batch
    norm's int64 step count among bf16 activations, fall back to one copy_ launch per tensor)."""
    groups: dict[tuple[torch.dtype, torch.device], tuple[list[torch.Tensor], list[torch.Tensor]]] = {}
    for destination, source in zip(destinations, sources, strict=True):
        pair = groups.setdefault((destination.dtype, destination.device), ([], []))
        pair[0].append(destination)
        pair[1].append(source)
    for group_destinations, group_sources in groups.values():
        torch._foreach_copy_(group_destinations, group_sources)


def write_inputs(inputs: Sequence[torch.Tensor], outputs: Sequence[torch.Tensor],
                 writes: Iterable[tuple[int, int]]) -> None:
    """Each (input, output) pair of `writes`: the output's value copied into the input (a function's in-place
    update of its input, computed as a new value), one launch per dtype."""
    pairs = list(writes)
    if pairs:
        copy_all([inputs[i] for i, _ in pairs], [outputs[j] for _, j in pairs])


class _Storage:
    """Graph memory handed out uncopied, by a weak reference to its storage: `held()` while any tensor other than
    the graph's own outputs and buffers uses it (the handed tensor, a view or a detached alias of it, all alike).
    Not counted: a holder of the storage object alone (`t.untyped_storage()` kept by a saved-tensor hook), which
    torch counts once however many hold it."""

    def __init__(self, tensor: torch.Tensor, positions: tuple[int, ...] = ()) -> None:
        from torch.multiprocessing.reductions import StorageWeakRef

        self.reference = StorageWeakRef(tensor.untyped_storage())
        self.own = torch._C._storage_Use_Count(self.reference.cdata)  # the graph's outputs and buffers
        self.positions = positions  # the outputs on it

    def held(self) -> bool:
        return bool(torch._C._storage_Use_Count(self.reference.cdata) > self.own)


class CudaGraphs:
    """`function(*tensors) -> tuple of tensors`, replayed from a CUDA graph captured per input layout.

    `static`: positions read in place (their address is part of the capture; parameters always are).
    `writes`: (input, output) pairs, the function's new values of inputs it mutates, written into them on every call.
    `clone_outputs`: return copies (the default, safe) or the graph's own output memory (overwritten by the next
    call). `warmup`: calls before a capture. `max_graphs`: layouts captured before further ones are refused.

        >>> graphed = CudaGraphs(lambda x: (x * 2,))
        >>> graphed(torch.ones(4, device="cuda"))[0]     # doctest: +SKIP
        tensor([2., 2., 2., 2.], device='cuda:0')
    """

    def __init__(self, function: Callable[..., Sequence[torch.Tensor]], *, static: Iterable[int] = (),
                 clone_outputs: bool = True, warmup: int = 2, max_graphs: int = 16, name: str = "program",
                 kept_from: int | None = None, handed: Iterable[int] = (),
                 writes: Iterable[tuple[int, int]] = ()) -> None:
        if warmup < 1:
            raise ValueError(f"warmup must be at least 1 (the first call compiles the kernels), got {warmup}")
        self.function = function
        self.static = frozenset(static)
        self.clone_outputs = clone_outputs
        self.warmup = warmup
        self.max_graphs = max_graphs
        self.name = name
        self.graphs: dict[tuple[Any, ...], list[_Graph]] = {}
        self.captures = 0
        self.replays = 0
        self._pool: Any = None
        # The positions whose layout keys the graphs (inputs copied into buffers, and values that are no tensors),
        # fixed at the first capture: a call's key is read from those alone, and a parameter read in place costs
        # one address comparison (its layout cannot change without its address changing, short of resize_).
        self._keyed: tuple[int, ...] | None = None
        self._from_graphs: frozenset[int] = frozenset()
        self._from_outputs: frozenset[int] = frozenset()  # of those, another graph's handed-out outputs
        self._arity = -1
        # outputs from this position on are handed out uncopied (saved activations; with clone_outputs only); the
        # last call's graph memory, by its storages: the next replay waits until nothing but the graph holds them
        self.kept_from = kept_from if clone_outputs else None
        # other outputs handed out uncopied, checked the same way: AOTAutograd's new values of mutated inputs, which
        # it copies into the inputs and lets go at once
        self.writes = tuple(writes)
        self.handed = frozenset((*handed, *(j for _, j in self.writes))) if clone_outputs else frozenset()
        self._handed: tuple[_Storage, ...] = ()
        # The outputs copied on every call (with clone_outputs), learnt: each output is first handed out as the
        # graph's memory, and one that its caller still holds at the next call (a loss kept for printing, a
        # gradient accumulated into) is copied from then on, in a graph captured again (the old one writes the
        # memory the caller holds). A backward's gradients, which autograd takes and an optimizer lets go before
        # the next step, and logits dropped after the loss, are then never copied.
        self.copied_outputs: set[int] = set()
        self.bypassed = 0  # calls run without the graph: the memory they would overwrite was still held

    def __repr__(self) -> str:
        bypassed = f", {self.bypassed} bypassed" if self.bypassed else ""
        return (f"CudaGraphs({self.name}, {self.captures} captured, {self.replays} replays{bypassed}, "
                f"clone_outputs={self.clone_outputs})")

    def __call__(self, *tensors: Any) -> tuple[torch.Tensor, ...]:
        if self._handed:
            held = [storage for storage in self._handed if storage.held()]
            kept = [p for storage in held for p in storage.positions if self._must_hand(p)]
            if held and len(kept) < sum(len(storage.positions) for storage in held):
                self._copy_from_now_on({p for storage in held for p in storage.positions} - set(kept))
            if kept:
                return self._bypass(tensors)  # a replay would overwrite activations a pending backward still holds
        entry = None
        if self._keyed is not None and len(tensors) == self._arity:
            listed = list(tensors)
            entry = next((c for entries in self.graphs.values() for c in entries if c.fits(listed)), None)
            if entry is None:  # compared in Python (what the C++ check refused, or where there is none)
                key = tuple(_layout(tensors[i]) for i in self._keyed)
                for candidate in self.graphs.get(key, ()):
                    if candidate.reads(listed) and all(_layout(tensors[i]) == layout
                                                       for i, layout in candidate.checked):
                        entry = candidate
                        break
        if entry is None and self._moved(tensors):
            entry = self._capture(tensors)  # another graph's output that moved: now copied, in a graph captured anew
        if entry is None and self._made_by_a_bypass(tensors):
            return self._bypass(tensors)  # activations a bypassed forward made on fresh memory: not graph memory
        if entry is None:
            entry = self._capture(tensors)
        if entry.copied:
            copy_all([entry.inputs[i] for i in entry.copied], [tensors[i] for i in entry.copied])
        entry.graph.replay()
        self.replays += 1
        write_inputs(tensors, entry.outputs, entry.host_writes)
        if entry.graph_writes:  # as an in-place op would: autograd refuses a stale saved value
            torch.autograd.graph.increment_version([tensors[position] for position in entry.graph_writes])
        if not self.clone_outputs:
            torch.autograd.graph.increment_version([o for o in entry.outputs if isinstance(o, torch.Tensor)])
            return entry.outputs
        cloned = [entry.outputs[i] for i in entry.cloned]
        copies = [torch.empty_like(o) for o in cloned]
        copy_all(copies, cloned)
        self._handed = entry.kept
        if len(copies) == len(entry.outputs):
            return tuple(copies)
        # the others: new tensor objects on the graph's memory (when their holders let them go, the memory is free
        # to overwrite)
        results = [o.detach() if isinstance(o, torch.Tensor) else o for o in entry.outputs]
        for position, copy in zip(entry.cloned, copies, strict=True):
            results[position] = copy
        return tuple(results)

    def _must_hand(self, position: int) -> bool:
        """An output always handed out uncopied: a saved activation, a mutated input's new value."""
        return position in self.handed or (self.kept_from is not None and position >= self.kept_from)

    def _copy_from_now_on(self, positions: set[int]) -> None:
        """Outputs the caller held past a call: copied on every later call. The graphs that handed them out are
        dropped (a replay would write the memory the caller holds); the next call captures again."""
        self.copied_outputs |= positions
        for entries in self.graphs.values():
            entries[:] = [e for e in entries if not any(p not in e.cloned for p in positions)]
        self._handed = ()
        if not any(self.graphs.values()):
            # torch's allocator refuses a capture into a pool whose graphs are all gone while its memory is still
            # held (here: by the outputs the caller kept): the next capture takes a pool of its own
            self._pool = None

    def _moved(self, tensors: Sequence[Any]) -> bool:
        """Whether a call that matches no graph brings, where a graph reads another graph's handed-out output in
        place, a tensor on other memory that is no graph's (that graph copies the output now: its caller held it).
        Those positions are copied into buffers from then on; the graphs are dropped, to be captured again."""
        if self._keyed is None or len(tensors) != self._arity or not self._from_outputs:
            return False
        moved = {i for i in self._from_outputs if isinstance(tensors[i], torch.Tensor)
                 and not lasting(tensors[i].data_ptr())}
        if not moved:
            return False
        self._keyed = tuple(sorted({*self._keyed, *moved}))
        self._from_graphs -= moved
        self._from_outputs -= moved
        self.graphs.clear()
        self._handed = ()
        self._pool = None  # (memory the dropped graphs handed out may still be held: a pool of its own)
        return True

    def _bypass(self, tensors: Sequence[Any]) -> tuple[torch.Tensor, ...]:
        """Run without the graph, on fresh memory (and write the mutated inputs, as a replay would)."""
        self.bypassed += 1
        outputs = tuple(self.function(*tensors))
        write_inputs(tensors, outputs, self.writes)
        return outputs

    def _made_by_a_bypass(self, tensors: Sequence[Any]) -> bool:
        """Whether a call that matches no graph brings, where a graph reads another graph's memory in place, a
        tensor that is neither that memory nor a parameter (a bypassed forward's activations): it runs without the
        graph rather than capturing one per such call."""
        if self._keyed is None or len(tensors) != self._arity:
            return False
        held = next((entries[0] for entries in self.graphs.values() if entries), None)
        if held is None:
            return False
        return any(i in self._from_graphs and isinstance(tensors[i], torch.Tensor) and tensors[i].data_ptr() != address
                   and not lasting(tensors[i].data_ptr()) for i, address in held.in_place)

    # -- capture ----------------------------------------------------------------------------------
    def _device(self, tensors: Sequence[Any]) -> torch.device:
        found = [(i, t.device) for i, t in enumerate(tensors) if isinstance(t, torch.Tensor)]
        refuse_cpu(tensors, f"the inputs of {self.name}")
        device = next(d for _, d in found if d.type == "cuda")
        elsewhere = [f"input {i} on {d}" for i, d in found if d != device]
        if elsewhere:
            raise CudaGraphsError(
                f"cudagraphs=True: {self.name} got {', '.join(elsewhere[:4])} beside inputs on {device}. A graph "
                "replays what it captured, so a value read from another device would be frozen at its first "
                "value: move every input to one CUDA device, or leave cudagraphs off")
        return device

    def _in_place(self, position: int, value: torch.Tensor) -> bool:
        """Read where it lies: a parameter, a static position, lasting memory, or a layout a buffer cannot copy
        (overlapping, as an expanded tensor is)."""
        if position in self.static or isinstance(value, torch.nn.Parameter):
            _remember([value])
            return True
        return lasting(value.data_ptr()) or torch._debug_has_internal_overlap(value) != 0

    def _partition(self, tensors: Sequence[Any]) -> tuple[int, ...]:
        """The positions keyed by layout: fixed by the first capture (later calls must take the same positions)."""
        if self._keyed is None:
            self._arity = len(tensors)
            self._keyed = tuple(i for i, value in enumerate(tensors)
                                if not isinstance(value, torch.Tensor) or not self._in_place(i, value))
            # read in place as another graph's memory (a forward's saved activations, in its backward graph)
            self._from_graphs = frozenset(
                i for i, value in enumerate(tensors) if i not in self._keyed and i not in self.static
                and not isinstance(value, torch.nn.Parameter) and lasting(value.data_ptr()))
            self._from_outputs = frozenset(i for i in self._from_graphs if movable(tensors[i].data_ptr()))
        elif len(tensors) != self._arity:
            raise CudaGraphsError(f"cudagraphs=True: {self.name} was captured with {self._arity} inputs and is "
                                  f"called with {len(tensors)}: call it as it was first called")
        unusable = [i for i in self._keyed if isinstance(tensors[i], torch.Tensor)
                    and torch._debug_has_internal_overlap(tensors[i]) != 0]
        if unusable:
            raise CudaGraphsError(
                f"cudagraphs=True: input {unusable[0]} of {self.name} has elements that share memory (an expanded "
                "tensor) where its first call had none, so it cannot be copied into the graph's buffer: pass "
                ".contiguous() inputs, or leave cudagraphs off")
        return self._keyed

    def _capture(self, tensors: Sequence[Any]) -> _Graph:
        device = self._device(tensors)
        keyed = self._partition(tensors)
        key = tuple(_layout(tensors[i]) for i in keyed)
        held = self.graphs.setdefault(key, [])
        if sum(len(entries) for entries in self.graphs.values()) >= self.max_graphs:
            raise CudaGraphsError(
                f"cudagraphs=True: {self.name} has captured {self.max_graphs} graphs (input layouts and parameter "
                "addresses) already; this call would capture another. Sizes that change on every call gain "
                "nothing from graphs: pad the inputs to a few sizes, or leave cudagraphs off")
        inputs: list[Any] = list(tensors)
        copied: list[int] = []
        in_place: list[tuple[int, int]] = []
        checked: list[tuple[int, Any]] = []
        for position, value in enumerate(tensors):
            if not isinstance(value, torch.Tensor):
                continue
            if position not in keyed:
                in_place.append((position, value.data_ptr()))
                if not isinstance(value, torch.nn.Parameter):
                    checked.append((position, _layout(value)))
                continue
            buffer = torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device=device)
            buffer.copy_(value)
            inputs[position] = buffer
            copied.append(position)
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        rng = torch.cuda.get_rng_state(device)
        with torch.cuda.device(device), torch.no_grad():
            side = torch.cuda.Stream(device)
            side.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(side):  # compiles, picks launchers, makes cuBLAS's workspace: not capturable
                for _ in range(self.warmup):
                    self.function(*inputs)
            torch.cuda.current_stream(device).wait_stream(side)
            torch.cuda.set_rng_state(rng, device)
            graph = torch.cuda.CUDAGraph()
            read = {position for position, _ in in_place}
            captured = [(i, j) for i, j in self.writes if i in read]  # the graph writes those inputs itself
            try:
                with torch.cuda.graph(graph, pool=self._pool):
                    outputs = tuple(self.function(*inputs))
                    write_inputs(inputs, outputs, captured)
            except RuntimeError as error:
                raise CudaGraphsError(
                    f"cudagraphs=True: capturing {self.name} failed ({str(error).splitlines()[0][:200]}). An op "
                    "that waits for the GPU or reads a value back to the CPU (nonzero, .item(), a data-dependent "
                    "size) cannot be captured: leave cudagraphs off for this function") from error
            torch.cuda.set_rng_state(rng, device)  # the first replay draws what an eager call would
        if not self.clone_outputs:
            _remember(outputs)
        kept: tuple[_Storage, ...] = ()
        uncopied = {i for i in range(len(outputs)) if i not in self.copied_outputs} if self.clone_outputs else set()
        cloned = tuple(i for i in range(len(outputs)) if i not in uncopied)
        if uncopied:
            saved = [o for o in outputs[self.kept_from:] if isinstance(o, torch.Tensor)] \
                if self.kept_from is not None else []
            # the other handed outputs (the next graph's input, a loss graph's logits) are read where they lie
            # until this graph copies them; the saved activations, which never move, after them (an output that is
            # also saved stays put)
            _remember([outputs[i] for i in uncopied if isinstance(outputs[i], torch.Tensor)
                       and not self._must_hand(i)], movable=True)
            _remember(saved)  # another graph (the backward) reads them where they lie
            # the memory a replay writes: its own, and the buffers it copies inputs into (not what it reads in place)
            unwritten = {t.untyped_storage().data_ptr() for position, t in enumerate(inputs)
                         if isinstance(t, torch.Tensor) and position not in copied}
            written: dict[int, tuple[torch.Tensor, list[int]]] = {}
            for i in sorted(uncopied):
                t = outputs[i]
                if isinstance(t, torch.Tensor) and t.untyped_storage().nbytes():
                    written.setdefault(t.untyped_storage().data_ptr(), (t, []))[1].append(i)
            kept = tuple(_Storage(t, tuple(positions)) for address, (t, positions) in written.items()
                         if address not in unwritten)
        # The buffers and the parameters stay referenced (a parameter is matched by its address alone: held, its
        # memory cannot be another tensor's); another tensor read in place (another graph's output, an expanded
        # input) is not kept alive by this graph: its layout is checked on every call.
        buffers = [value if position in copied or position in self.static or isinstance(value, torch.nn.Parameter)
                   else None for position, value in enumerate(inputs)]
        guarded = (*copied, *(position for position, _ in checked))
        entry = _Graph(graph, buffers, tuple(copied), tuple(in_place), tuple(checked), outputs, cloned, kept,
                       tuple((i, j) for i, j in self.writes if i not in read), tuple(i for i, _ in captured),
                       guarded, layout_guard([tensors[i] for i in guarded]),
                       tuple((i, tensors[i]) for i in keyed if not isinstance(tensors[i], torch.Tensor)))
        held.append(entry)
        self.captures += 1
        return entry
