"""NodeAffinity: the pod's node selector and required node-affinity terms, matched against label
columns (terms are ORed, a term's expressions ANDed; an empty term matches nothing, as upstream)."""

from __future__ import annotations

import contextlib

import numpy as np
import numpy.typing as npt

from policies.framework.contract import BoolArray, CycleContext, IntArray, Nodes, node_count
from policies.snapshot import Snapshot
from schemas.pod import NodeSelectorRequirement

__all__ = ["NAME", "REASON", "NodeAffinity", "new"]

NAME = "NodeAffinity"
REASON = "node(s) didn't match Pod's node affinity/selector"


def _numeric(snapshot: Snapshot, key: str) -> npt.NDArray[np.float64]:
    """Label values of `key` as integers by value id (NaN where the value is not an integer)."""
    vocab = snapshot.label_vocab.get(key, {})
    values = np.full(len(vocab), np.nan)
    for text, value_id in vocab.items():
        with contextlib.suppress(ValueError):
            values[value_id] = int(text)
    return values


def _expression(snapshot: Snapshot, expr: NodeSelectorRequirement, nodes: Nodes) -> BoolArray:
    column = snapshot.label_columns.get(expr.key)
    if column is None:
        absent = expr.operator in ("NotIn", "DoesNotExist")
        return np.full(node_count(nodes), absent, dtype=np.bool_)
    ids = column[nodes]
    if expr.operator in ("In", "NotIn"):
        wanted = [snapshot.label_value_id(expr.key, v) for v in expr.values]
        member: BoolArray = np.isin(ids, wanted)
        return member if expr.operator == "In" else ~member
    if expr.operator == "Exists":
        exists: BoolArray = ids >= 0
        return exists
    if expr.operator == "DoesNotExist":
        missing: BoolArray = ids < 0
        return missing
    numbers = _numeric(snapshot, expr.key)
    values = np.where(ids >= 0, numbers[np.maximum(ids, 0)] if len(numbers) else np.nan, np.nan)
    bound = int(expr.values[0])
    compared: BoolArray = values > bound if expr.operator == "Gt" else values < bound
    return compared


class NodeAffinity:
    name = NAME

    def filter(self, ctx: CycleContext, nodes: Nodes) -> BoolArray | None:
        snapshot, pod = ctx.snapshot, ctx.pod
        if not pod.node_selector and not pod.node_affinity:
            return None
        count = node_count(nodes)
        fits = np.ones(count, dtype=np.bool_)
        for key, value in pod.node_selector.items():
            column = snapshot.label_columns.get(key)
            if column is None:
                return np.zeros(count, dtype=np.bool_)
            fits &= column[nodes] == snapshot.label_value_id(key, value)
        if pod.node_affinity:
            any_term = np.zeros(count, dtype=np.bool_)
            for term in pod.node_affinity:
                if not term.match_expressions:
                    continue
                term_fits = np.ones(count, dtype=np.bool_)
                for expr in term.match_expressions:
                    term_fits &= _expression(snapshot, expr, nodes)
                any_term |= term_fits
            fits &= any_term
        return fits

    def reasons(self, ctx: CycleContext, nodes: IntArray) -> list[list[str]]:
        shared = [REASON]  # read-only, like every reason list
        return [shared] * len(nodes)


def new(args: None, handle: object) -> NodeAffinity:
    return NodeAffinity()
