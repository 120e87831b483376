"""Hypothesis strategies for hostile input, shared by the fuzz tests (issue 21).

`examples(n)`: how many examples a fuzz test runs — n in the suite, 20×n under
`pytest --fuzz-long` (or HERMES_FUZZ_LONG=1), the longer profile for a quiet machine.
`mutated(doc)`: a copy of a JSON document (a golden webhook body, an export line) with one to
three values anywhere in it replaced by hostile ones of any type, or a key removed.
"""

from __future__ import annotations

import copy
import os
from typing import Any

from hypothesis import strategies as st

LONG = 20

# Values chosen to break parsers, binders and arithmetic: past 64 bits, not finite, lone
# surrogates, NUL, huge strings, odd containers.
EXTREMES = st.sampled_from(
    [
        2**63 - 1,
        2**63,
        2**70,
        -(2**63) - 1,
        10**400,
        float("nan"),
        float("inf"),
        "\ud800",
        "a\udfffb",
        "\x00",
        "",
        " ",
        "../../etc/passwd",
        "x" * 5000,
        "🙂" * 50,
        [],
        {},
    ]
)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=40),
    EXTREMES,
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)


# What most often breaks a field of each kind: the extremes of its own type, then a wrong type.
FOR_NUMBER = st.sampled_from(
    [2**63, 2**70, -(2**63) - 1, 10**400, -1, 0, float("nan"), float("inf"), "1", True, None]
)
FOR_TEXT = st.sampled_from(
    ["\ud800", "a\udfffb", "\x00", "", " ", "../../etc/passwd", "a/b", "x" * 5000, 1, None, ["x"]]
)


def _hostile_for(current: Any) -> st.SearchStrategy[Any]:
    if isinstance(current, bool) or current is None:
        return EXTREMES
    if isinstance(current, int | float):
        return FOR_NUMBER
    if isinstance(current, str):
        return FOR_TEXT
    return EXTREMES


def examples(n: int) -> int:
    return n * LONG if os.environ.get("HERMES_FUZZ_LONG") else n


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in `doc`; containers count once, their leaves each."""
    found: list[tuple[Any, ...]] = [prefix] if prefix else []
    if isinstance(doc, dict):
        for key, value in doc.items():
            found.extend(_paths(value, (*prefix, key)))
    elif isinstance(doc, list):
        for index, value in enumerate(doc):
            found.extend(_paths(value, (*prefix, index)))
    return found


def _set(doc: Any, path: tuple[Any, ...], value: Any, remove: bool) -> None:
    node = doc
    for step in path[:-1]:
        node = node[step]
    if remove and isinstance(node, dict):
        del node[path[-1]]
    else:
        node[path[-1]] = value


@st.composite
def mutated(draw: st.DrawFn, doc: Any) -> Any:
    """`doc` with 1–3 values replaced by EXTREMES or VALUES (or their keys removed)."""
    result = copy.deepcopy(doc)
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        paths = _paths(result)
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        current: Any = result
        for step in path:
            current = current[step]
        # mostly the extremes of the field's own type: they are what finds the bugs
        own = _hostile_for(current)
        value = copy.deepcopy(draw(st.one_of(own, own, own, VALUES)))  # EXTREMES holds [] and {}
        _set(result, path, value, draw(st.booleans()) and draw(st.booleans()))
    return result
