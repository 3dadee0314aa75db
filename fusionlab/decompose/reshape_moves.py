"""Reshapes moved to where their value is in memory anyway, so the pointwise ops beside them join a kernel.

A kernel indexes one shape (fusion/domain.py), so a reshape that merges or splits dimensions runs as a view between
kernels, and the value it reshapes is written whole first. A causal LM's loss upcasts the bf16 logits and flattens
them, `log_softmax(float(logits).view(-1, vocab))`: the cast ran as a kernel of its own that wrote the float32
logits (4 bytes an element, 200 M elements at GPT-2's vocabulary) for the log-softmax to read back; its backward
reshapes the float32 gradient back and casts it to bf16, one more kernel reading and writing the whole table.
A pointwise op commutes with a reshape (its elements are its operands' elements at the same place, and a reshape
keeps their order), so this pass moves the reshape across it:

- **up**, `reshape(f(x)) -> f(reshape(x))`, where the ops above the reshape lead only to values in memory anyway
  (graph inputs, extern results: their reshape is a free view); the ops then fuse into the reshape's consumer;
- **down**, `f(reshape(v)) -> reshape(f(v))`, where `v` is computed by a kernel: `f` then joins `v`'s kernel and
  its result is reshaped as a view instead. `f`'s other operands are reshapes of such values, broadcasts, or values
  in memory (a backward adds the model's incoming gradient of the logits to the loss's: `add(dlogits, reshape(g))`).

Only a value read by the reshape alone moves (nothing is computed twice), and only static sizes. The two
directions never undo each other: a reshape moved up sits on inputs and extern results, one moved down below a
kernel's value.

    >>> move_reshapes(graph)       # reshape(cast(logits)) -> cast(reshape(logits)): the cast fuses into amax
"""

from __future__ import annotations

from fusionlab.decompose.hoist import broadcast_groups, dim_groups, hoistable
from fusionlab.ir import Dim, Graph, Kind, Node, Ref, TensorType, draws_random_numbers

__all__ = ["move_reshapes"]


def move_reshapes(graph: Graph) -> Graph:
    """`graph` with each reshape that can move across pointwise ops moved (see the module's docstring)."""
    mover = _Mover(graph)
    for node in graph.nodes:
        mover.visit(node)
    if not mover.moved:
        return graph
    return Graph(graph.inputs, _live(list(mover.nodes.values()), graph.outputs), graph.outputs, graph.hints)


def _static(shape: tuple[Dim, ...]) -> bool:
    return all(isinstance(d, int) for d in shape)


def _unit(before: tuple[Dim, ...], after: tuple[Dim, ...]) -> bool:
    return tuple(d for d in before if d != 1) == tuple(d for d in after if d != 1)


def _elementwise(node: Node) -> bool:
    """A pointwise op of its operands' elements at the same index, every operand of its own shape."""
    if not hoistable(node) or draws_random_numbers(node) or node.param("extra_refs"):
        return False
    if any(key != "dtype" for key, _ in node.params):
        return False  # an output's copy (`apart`) and the like stay where they are
    return True


class _Mover:
    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.users = graph.users()
        self.outputs = set(graph.outputs)
        self.nodes: dict[str, Node] = {}  # the rewritten program so far, in order
        self.taken = {node.name for node in graph.nodes}
        self.lifted: dict[tuple[str, tuple[int, ...]], Ref] = {}
        self.new_users: dict[str, list[str]] = {}  # the readers of the values this pass made
        self.moved = False

    def visit(self, node: Node) -> None:
        if node.kind == "view" and node.op == "reshape" and self._liftable_reshape(node):
            self.moved = True
            self._lift(node.inputs[0], tuple(node.type.shape), node, name=node.name)  # read by its name
        elif node.kind == "pointwise" and self._sinkable(node):
            self.moved = True
            self._sink(node)
        else:
            self.nodes[node.name] = node

    # -- helpers ---------------------------------------------------------------------------------------
    def _only_reader(self, value: str, reader: str) -> bool:
        readers = self.users[value] if value in self.users else tuple(self.new_users.get(value, ()))
        return value not in self.outputs and readers == (reader,)

    def _emit(self, kind: Kind, op: str, args: tuple, shape: tuple[int, ...], like: Node, *,
              dtype: object = None, params: tuple = (), name: str | None = None) -> Ref:
        if name is None:
            name, number = like.op if like.op.isidentifier() else "moved", 0
            while name in self.taken:
                number += 1
                name = f"{like.op if like.op.isidentifier() else 'moved'}_{number}"
        self.taken.add(name)
        for a in args:
            if isinstance(a, Ref) and a.name not in self.users and name not in self.new_users.get(a.name, ()):
                self.new_users.setdefault(a.name, []).append(name)
        out = TensorType(shape, dtype if dtype is not None else like.type.dtype)  # type: ignore[arg-type]
        self.nodes[name] = Node(name, kind, op, args, out, params, like.origin, like.module, like.source)
        return Ref(name)

    def _reshape(self, value: str, shape: tuple[int, ...], like: Node, name: str | None = None) -> Ref:
        """`value` reshaped as a view (a reshape of a reshape reshapes its source)."""
        node = self._current(value)
        if node.kind == "view" and node.op == "reshape":
            value = node.inputs[0]
            node = self._current(value)
        if tuple(node.type.shape) == shape and name is None:
            return Ref(value)
        return self._emit("view", "reshape", (Ref(value),), shape, like, dtype=node.type.dtype,
                          params=(("shape", shape),), name=name)

    def _current(self, value: str) -> Node:
        return self.nodes[value] if value in self.nodes else self.graph[value]

    # -- up: reshape(f(x)) -> f(reshape(x)) ------------------------------------------------------------
    def _liftable_reshape(self, node: Node) -> bool:
        source = self._current(node.inputs[0])
        if not (_static(tuple(source.type.shape)) and _static(tuple(node.type.shape))):
            return False
        if _unit(tuple(source.type.shape), tuple(node.type.shape)):
            return False  # only adds or drops size-1 dims: a kernel reads through it already
        if dim_groups(tuple(source.type.shape), tuple(node.type.shape)) is None:
            return False
        return (source.kind == "pointwise" and self._only_reader(source.name, node.name)
                and self._liftable(source.name, tuple(node.type.shape), node.name))

    def _liftable(self, value: str, shape: tuple[int, ...], reader: str) -> bool:
        """Whether `value` reshaped to `shape` can be computed from reshapes of inputs and extern results."""
        node = self._current(value)
        before = tuple(node.type.shape)
        if not _static(before) or dim_groups(before, shape) is None:
            return False
        if node.kind in ("input", "extern"):
            return True
        if node.kind == "pointwise" and node.op == "full" and not node.args:
            return True
        if node.kind == "view" and node.op == "expand":
            small = self._broadcast_source(node, shape)
            return small is not None and self._liftable(node.inputs[0], small, node.name)
        if node.kind == "view" and node.op == "reshape":  # a reshape of a reshape reshapes its source
            return self._liftable(node.inputs[0], shape, node.name)
        if node.kind != "pointwise" or not _elementwise(node) or not self._only_reader(value, reader):
            return False
        refs = [a for a in node.args if isinstance(a, Ref)]
        return all(tuple(self._current(a.name).type.shape) == before and self._liftable(a.name, shape, node.name)
                   for a in refs)

    def _broadcast_source(self, node: Node, shape: tuple[int, ...]) -> tuple[int, ...] | None:
        """The shape an expand's source takes so that its broadcast to `shape` is the reshape of the expand."""
        before = tuple(node.type.shape)
        groups = dim_groups(before, shape)
        source = tuple(self._current(node.inputs[0]).type.shape)
        if groups is None or not _static(source):
            return None
        return broadcast_groups(source, before, shape, groups)

    def _lift(self, value: str, shape: tuple[int, ...], like: Node, name: str | None = None) -> Ref:
        key = (value, shape)
        if name is None and key in self.lifted:
            return self.lifted[key]
        node = self._current(value)
        if node.kind in ("input", "extern"):
            result = self._reshape(value, shape, like, name)
        elif node.kind == "pointwise" and node.op == "full":
            result = self._emit("pointwise", "full", (), shape, node, params=node.params, name=name)
        elif node.kind == "view" and node.op == "reshape":
            result = self._lift(node.inputs[0], shape, like, name)
        elif node.kind == "view" and node.op == "expand":
            small = self._broadcast_source(node, shape)
            assert small is not None
            source = self._lift(node.inputs[0], small, node)
            result = self._emit("view", "expand", (source,), shape, node, params=(("shape", shape),), name=name)
        else:
            args = tuple(self._lift(a.name, shape, node) if isinstance(a, Ref) else a for a in node.args)
            result = self._emit("pointwise", node.op, args, shape, node, params=node.params, name=name)
        if name is None:
            self.lifted[key] = result
        return result

    # -- down: f(reshape(v)) -> reshape(f(v)) ----------------------------------------------------------
    def _sunk_operands(self, node: Node) -> tuple[tuple[int, ...], list[tuple[str, str]]] | None:
        """The shape `node` would be computed at and, per operand, how it reads there: ("source", v) for a reshape
        of a kernel's value, ("expand", x) for a broadcast, ("memory", x) for an input or extern result of `node`'s
        shape (a backward's incoming gradient); None where it cannot move."""
        after = tuple(node.type.shape)
        shape: tuple[int, ...] | None = None
        for a in node.args:
            if isinstance(a, Ref):
                operand = self._current(a.name)
                if operand.kind == "view" and operand.op == "reshape":
                    before = tuple(self._current(operand.inputs[0]).type.shape)
                    shape = shape or before  # type: ignore[assignment]
                    if before != shape or _unit(before, after):
                        return None
        if shape is None or not _static(shape) or not _static(after) or dim_groups(after, shape) is None:
            return None
        reads: list[tuple[str, str]] = []
        for a in node.args:
            if not isinstance(a, Ref):
                continue
            operand = self._current(a.name)
            if operand.kind == "view" and operand.op == "reshape":
                source = self._current(operand.inputs[0])
                if (not self._only_reader(operand.name, node.name) or source.kind not in ("pointwise", "reduction")
                        or not self._only_reader(source.name, operand.name)):
                    return None
                reads.append(("source", source.name))
            elif operand.kind == "view" and operand.op == "expand":
                small = self._broadcast_source(operand, shape)
                if small is None:
                    return None
                reads.append(("expand", a.name))
            elif operand.kind in ("input", "extern") and tuple(operand.type.shape) == after:
                reads.append(("memory", a.name))  # in memory anyway: read through a reshape view of it
            else:
                return None
        return shape, reads

    def _sinkable(self, node: Node) -> bool:
        return _elementwise(node) and self._sunk_operands(node) is not None

    def _sink(self, node: Node) -> None:
        found = self._sunk_operands(node)
        assert found is not None
        shape, reads = found
        moved = iter(reads)
        args: list[object] = []
        for a in node.args:
            if not isinstance(a, Ref):
                args.append(a)
                continue
            how, value = next(moved)
            if how == "source":
                args.append(Ref(value))
            elif how == "memory":
                args.append(self._reshape(value, shape, self._current(value)))
            else:
                expand = self._current(value)
                small = self._broadcast_source(expand, shape)
                assert small is not None
                source = self._reshape(expand.inputs[0], small, expand)
                args.append(self._emit("view", "expand", (source,), shape, expand, params=(("shape", shape),)))
        computed = self._emit("pointwise", node.op, tuple(args), shape, node, params=node.params)
        self._reshape(computed.name, tuple(node.type.shape), node, name=node.name)


def _live(nodes: list[Node], outputs: tuple[str, ...]) -> tuple[Node, ...]:
    """Drop the values the moves left unread (the pointwise ops computed at the old shape)."""
    needed = set(outputs)
    for node in reversed(nodes):
        if node.name in needed or node.kind in ("input", "extern"):
            needed.update(node.inputs)
    return tuple(n for n in nodes if n.kind in ("input", "extern") or n.name in needed)
