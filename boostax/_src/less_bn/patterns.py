# Copyright 2026 The boostax Authors.
# SPDX-License-Identifier: Apache-2.0
"""MindSpore's LessBN graph pass, run on a model's data-flow graph.

MindSpore removes BatchNorms with a graph pass
(``less_batch_normalization.cc``) that walks back from a *start* operation
along first inputs and compares the operations it meets with 16 fixed
patterns. This module runs the same state machine on the layer graph of
`model_graph`, so that a Flax model loses exactly the BatchNorms its
MindSpore twin loses, and says which pattern removed each.

How MindSpore matches, and what is reproduced here:

* Start operations are ``Add``, ``ReLU6``, ``MatMul`` (a dense layer),
  ``MakeTuple`` (the inputs of a concatenation) and ``MaxPool``, whose inputs
  are all computed nodes (not the network's input).
* A pattern is a list of branches ``(count, ops, remove range)``. Branch 0 is
  matched on the start's first input, branch 1 on the second, walking back
  along each node's first input; ``ops`` is cycled, and ``TupleGetItem`` (in
  MindSpore the node reading a BatchNorm's output) matches any node. Progress
  carries over from one input to the next, so a branch may end on the next
  input (some of MindSpore's quirks come from this).
* BatchNorms met at positions inside a branch's remove range are removed
  when the whole pattern matches. Patterns are tried in order 1..16 and the
  first match wins.
* Start operations are visited breadth-first from the outputs, each seeing
  the graph as already reduced by earlier matches.

Deviations, each deliberate:

* ``a + b`` is matched in the written order and, when no pattern matches,
  with the operands swapped: MindSpore's model zoo writes the residual branch
  first (ResNet) or the identity first (MobileNetV2), JAX code either way.
* Convolutions of any spatial rank, grouped or not, count as ``Conv2D``;
  casts and reshapes are transparent; a conv bias is part of the conv.
* Models are traced in evaluation mode, so Dropout is not in the graph.
* The dense layer that becomes an FN head is no start (MindSpore's FN head
  puts an ``L2Normalize`` before its ``MatMul``).

References:
  MindSpore, ``mindspore/ccsrc/frontend/optimizer/irpass/
  less_batch_normalization.cc`` (patterns ``kNeedMatchPattern``) and
  ``irpass.cc`` (the start operations).
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Collection, Iterator

from boostax._src import model_graph

# MindSpore primitive names, as the patterns use them.
TUPLE_GET_ITEM = "TupleGetItem"  # the pattern's wildcard
BATCH_NORM = "BatchNorm"
CONV = "Conv2D"
RELU = "ReLU"
RELU6 = "ReLU6"
ADD = "Add"
CONCAT = "Concat"
MAKE_TUPLE = "MakeTuple"
MAX_POOL = "MaxPool"
MEAN = "ReduceMean"
MATMUL = "MatMul"

START_OPS = frozenset({ADD, RELU6, MATMUL, MAKE_TUPLE, MAX_POOL})

_OP_OF_KIND = {
    "conv": CONV,
    "grouped_conv": CONV,
    "relu": RELU,
    "relu6": RELU6,
    "add": ADD,
    "concat": CONCAT,
    "max_pool": MAX_POOL,
    "mean": MEAN,
    "dense": MATMUL,
}


@dataclasses.dataclass(frozen=True)
class Branch:
    """One branch of a pattern: `count` nodes, `ops` cycled.

    Attributes:
      count: how many nodes the branch matches.
      ops: the operation expected at branch position ``i`` is
        ``ops[i % len(ops)]``.
      remove: ``(first, last)`` global positions whose BatchNorms go, or
        ``None``.
    """

    count: int
    ops: tuple[str, ...]
    remove: tuple[int, int] | None


@dataclasses.dataclass(frozen=True)
class Pattern:
    """One of MindSpore's 16 LessBN patterns.

    Attributes:
      number: MindSpore's order, 1-16 (the first match wins).
      name: MindSpore's name for it.
      block: the structure it recognizes, in words.
      branches: the `Branch` es.
      roles: global position where a removed BN is met (its
        TupleGetItem) -> what that BN is.
    """

    number: int
    name: str
    block: str
    branches: tuple[Branch, ...]
    roles: dict[int, str]


def _branch(count, ops, remove=None) -> Branch:
    return Branch(count, tuple(ops), remove)


W, BN = TUPLE_GET_ITEM, BATCH_NORM
_FIRST = "first BN of the residual branch"
_SECOND = "second BN of the residual branch"
_PROJECTION = "BN of the projection shortcut"
_EXPANSION = "BN of the expansion conv"
_ON_CONCAT = "BN applied to the concatenation"
_AFTER_POOL = "second BN of a dense layer reading a max pool"

PATTERNS: tuple[Pattern, ...] = (
    Pattern(
        1,
        "ResidualStructureBasePattern",
        "ResNet bottleneck, projection shortcut",
        (
            _branch(12, [W, BN, CONV, RELU], (4, 11)),
            _branch(3, [W, BN, CONV], (12, 14)),
        ),
        {4: _SECOND, 8: _FIRST, 12: _PROJECTION},
    ),
    Pattern(
        2,
        "ResidualStructureShortCutPattern",
        "ResNet bottleneck, identity shortcut",
        (
            _branch(12, [W, BN, CONV, RELU], (4, 11)),
            _branch(1, [RELU], (12, 2)),
        ),
        {4: _SECOND, 8: _FIRST},
    ),
    Pattern(
        3,
        "ResidualStructureFirstStepPattern",
        "ResNet bottleneck, projection shortcut, any block input",
        (
            _branch(11, [W, BN, CONV, RELU] * 2 + [W, BN, CONV], (4, 10)),
            _branch(3, [W, BN, CONV], (11, 13)),
        ),
        {4: _SECOND, 8: _FIRST, 11: _PROJECTION},
    ),
    Pattern(
        4,
        "BasicStructBasePattern",
        "ResNet basic block, projection shortcut",
        (
            _branch(8, [W, BN, CONV, RELU], (4, 6)),
            _branch(3, [W, BN, CONV], (8, 11)),
        ),
        {4: _FIRST, 8: _PROJECTION},
    ),
    Pattern(
        5,
        "BasicStructFirstStepPattern",
        "ResNet basic block after max pooling",
        (
            _branch(7, [W, BN, CONV, RELU, W, BN, CONV], (4, 6)),
            _branch(1, [MAX_POOL], (7, 10)),
        ),
        {4: _FIRST},
    ),
    Pattern(
        6,
        "BasicStructShortCutPattern",
        "ResNet basic block, identity shortcut",
        (
            _branch(8, [W, BN, CONV, RELU], (4, 6)),
            _branch(1, [RELU], (8, 11)),
        ),
        {4: _FIRST},
    ),
    Pattern(
        7,
        "InvertedResidualShortCutPattern",
        "MobileNetV2 inverted residual after a block without shortcut",
        (
            _branch(1, [W, BN]),
            _branch(
                13,
                [W, BN, CONV, RELU6] * 2 + [W, BN, CONV, W, BN],
                (7, 10),
            ),
        ),
        {9: _EXPANSION},
    ),
    Pattern(
        8,
        "InvertedResidualPattern",
        "conv-BN reading a residual add",
        (_branch(4, [W, BN, CONV, ADD], (0, 3)),),
        {0: "BN of the first conv after a residual add"},
    ),
    Pattern(
        9,
        "InvertedResidualShortCutPattern2",
        "MobileNetV2 inverted residual after a residual block",
        (
            _branch(1, [ADD]),
            _branch(12, [W, BN, CONV, RELU6] * 2 + [W, BN, CONV, ADD], (7, 10)),
        ),
        {9: _EXPANSION},
    ),
    Pattern(
        10,
        "InvertedResidualPattern2",
        "MobileNetV2 head",
        (_branch(5, [MEAN, RELU6, W, BN, CONV], (0, 4)),),
        {2: "BN of the last conv before global average pooling"},
    ),
    Pattern(
        11,
        "InvertedResidualPattern3",
        "MobileNetV2 inverted residual after a block without shortcut "
        "(matched from its depthwise ReLU6)",
        (
            _branch(
                17,
                [W, BN, CONV, RELU6, W, BN, CONV, W, BN, CONV]
                + [RELU6, W, BN, CONV, RELU6, W, BN],
                (3, 6),
            ),
        ),
        {4: _EXPANSION},
    ),
    Pattern(
        12,
        "DenseBlockShortCutPattern",
        "DenseNet bottleneck layer, (features, new) concatenated",
        (
            _branch(1, [CONCAT]),
            _branch(9, [CONV, RELU, W, BN] * 2 + [CONCAT], (6, 9)),
        ),
        {7: _ON_CONCAT},
    ),
    Pattern(
        13,
        "DenseBlockPattern",
        "BN-ReLU-conv reading a concatenation (DenseNet basic layer or "
        "max-pool transition)",
        (_branch(5, [CONV, RELU, W, BN, CONCAT], (0, 4)),),
        {2: "BN of a BN-ReLU-conv whose walk ends on a concatenation"},
    ),
    Pattern(
        14,
        "DenseBlockShortCutPattern2",
        "DenseNet bottleneck layer, (new, features) concatenated",
        (
            _branch(9, [CONV, RELU, W, BN] * 2 + [CONCAT], (5, 8)),
            _branch(1, [CONCAT]),
        ),
        {6: _ON_CONCAT},
    ),
    Pattern(
        15,
        "DenseBlockPoolPattern",
        "dense layer reading a max pool, concatenated before a concatenation",
        (
            _branch(9, [CONV, RELU, W, BN] * 2 + [MAX_POOL], (0, 4)),
            _branch(1, [CONCAT]),
        ),
        {2: _AFTER_POOL},
    ),
    Pattern(
        16,
        "DenseBlockPoolPatter2",
        "dense layer reading a max pool, concatenated after a concatenation",
        (
            _branch(1, [CONCAT]),
            _branch(9, [CONV, RELU, W, BN] * 2 + [MAX_POOL], (1, 5)),
        ),
        {3: _AFTER_POOL},
    ),
)


@dataclasses.dataclass(frozen=True)
class PatternMatch:
    """A BatchNorm removed by a pattern.

    Attributes:
      batch_norm: the BN's node id in the `model_graph.Graph`.
      pattern: the `Pattern` that removed it.
      position: the pattern position where the BN was met.
    """

    batch_norm: int
    pattern: Pattern
    position: int

    @property
    def role(self) -> str:
        return self.pattern.roles.get(
            self.position, f"BN at position {self.position} of the pattern"
        )


# A node of MindSpore's view of the graph: (graph node id, part). A BatchNorm
# layer is two nodes, the BatchNorm (part "bn") and the TupleGetItem reading
# it ("tgi"); a concatenation is a Concat (None) reading a MakeTuple ("mk").
_Ref = tuple[int, str | None]


class _MindSporeView:
    """The graph as MindSpore's pass sees it, with removals applied."""

    def __init__(self, graph: model_graph.Graph):
        self.graph = graph
        self.removed: set[int] = set()

    def _resolve(self, node: model_graph.Node | None):
        # A removed BatchNorm is replaced by its input.
        while node is not None and node.id in self.removed:
            node = self.graph.producer(node)
        return node

    def ref(self, node: model_graph.Node) -> _Ref | None:
        """What a reader of `node` sees; ``None`` for a network input."""
        node = self._resolve(node)
        if node is None or node.kind == "input":
            return None
        return (node.id, "tgi" if node.kind == "batch_norm" else None)

    def op(self, ref: _Ref) -> str:
        node_id, part = ref
        if part == "tgi":
            return TUPLE_GET_ITEM
        if part == "bn":
            return BATCH_NORM
        if part == "mk":
            return MAKE_TUPLE
        kind = self.graph.nodes[node_id].kind
        return _OP_OF_KIND.get(kind, kind)

    def inputs(self, ref: _Ref) -> list[_Ref | None]:
        node_id, part = ref
        node = self.graph.nodes[node_id]
        if part == "tgi":
            return [(node_id, "bn")]
        if part is None and node.kind == "concat":
            return [(node_id, "mk")]
        data = self.graph.data_inputs(node)
        if part == "bn":  # the data input; gamma, beta, ... are parameters
            data = data[:1]
        return [self.ref(n) for n in data]

    def first_input(self, ref: _Ref) -> _Ref | None:
        inputs = self.inputs(ref)
        return inputs[0] if inputs else None

    def removable(self, ref: _Ref) -> bool:
        return ref[1] in ("tgi", "bn")

    def breadth_first(self) -> Iterator[_Ref]:
        """Every node, outputs first (MindSpore's sweep from the return)."""
        # A sink may be a cast or reshape of the logits: its inputs are
        # read through it, like any node's.
        sinks = [n for n in self.graph.nodes if not n.consumers]
        queue = collections.deque(r for r in map(self.ref, sinks) if r)
        seen = set()
        while queue:
            ref = queue.popleft()
            if ref in seen:
                continue
            seen.add(ref)
            yield ref
            # Read the inputs only now: a match at `ref` may have rewired them.
            queue.extend(r for r in self.inputs(ref) if r is not None)


def _try(view: _MindSporeView, inputs, pattern: Pattern):
    """One pattern at one start node.

    Follows MindSpore's ``Visit``/``MatchGraphStructure``/``IsRemoveNode``
    exactly: the position counter is shared by the inputs, a BN is marked
    before its position is checked, and inputs after a complete match are
    still walked (with the last branch's remove range).

    Returns:
      ``None`` if the pattern does not match, else ``({BN id: position},
      carried)``, `carried` saying whether a branch was begun on one input
      and finished on another.
    """
    ends = [0]
    for branch in pattern.branches:
        ends.append(ends[-1] + branch.count)
    position, branch_index, matched, carried = 0, 0, False, False
    branch_input = 0  # the input the current branch began on
    marks: dict[int, int] = {}
    for input_index, ref in enumerate(inputs):
        while ref is not None:
            branch = pattern.branches[branch_index]
            if view.removable(ref) and branch.remove is not None:
                first, last = branch.remove
                if first <= position <= last:
                    marks.setdefault(ref[0], position)
            want = branch.ops[(position - ends[branch_index]) % len(branch.ops)]
            if want != TUPLE_GET_ITEM and view.op(ref) != want:
                break
            if position == ends[branch_index]:
                branch_input = input_index
            elif not matched and branch_input != input_index:
                carried = True
            position += 1
            if position == ends[-1]:
                matched = True
                break
            if position == ends[branch_index + 1]:
                branch_index += 1
                break
            ref = view.first_input(ref)
    return (marks, carried) if matched else None


def _first_match(view, inputs):
    """``(pattern, marks, carried)`` of the first pattern matching, or None.

    The first pattern that matches wins, even if it marks no BatchNorm.
    """
    for pattern in PATTERNS:
        found = _try(view, inputs, pattern)
        if found is not None:
            return (pattern, *found)
    return None


def _best_match(view, orders):
    """The match to apply at a start node, over its input orders.

    The written order wins unless it only matches by carrying a branch from
    one operand of an add to the other, which happens in MindSpore only
    because of the order the operands are written in, and the swapped order
    matches one branch per operand.
    """
    found = []
    for inputs in orders:
        hit = _first_match(view, inputs)
        if hit is not None:
            pattern, marks, carried = hit
            if not carried:
                return pattern, marks
            found.append((pattern, marks))
    return found[0] if found else None


def match(
    graph: model_graph.Graph, *, not_starts: Collection[int] = ()
) -> list[PatternMatch]:
    """The BatchNorms MindSpore's LessBN pass removes from `graph`.

    Args:
      graph: a model's `model_graph.Graph`.
      not_starts: node ids that may not start a match (the dense layer an FN
        head replaces).

    Returns:
      One `PatternMatch` per removed BatchNorm, in call order.
    """
    view = _MindSporeView(graph)
    found: list[PatternMatch] = []
    for ref in view.breadth_first():
        node_id = ref[0]
        if node_id in not_starts:
            continue
        hit = _best_match(view, _start_inputs(view, ref))
        if hit is None:
            continue
        pattern, marks = hit
        found += [
            PatternMatch(bn, pattern, position)
            for bn, position in marks.items()
            if bn not in view.removed
        ]
        view.removed.update(marks)
    return sorted(found, key=lambda m: graph.nodes[m.batch_norm].layer.index)


def _start_inputs(view, ref) -> list[list[_Ref]]:
    """The input orders to try at `ref`, if it is a start node."""
    op = view.op(ref)
    if op not in START_OPS:
        return []
    inputs = view.inputs(ref)
    if not inputs or any(r is None for r in inputs):
        return []
    if op == ADD and len(inputs) == 2:
        return [inputs, inputs[::-1]]
    return [inputs]
