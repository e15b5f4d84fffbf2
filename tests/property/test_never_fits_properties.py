"""The webhook's never-fits check is the planner's: for random clusters, queue trees and gangs,
`NeverFitsScreen` (what the webhook asks at create) says NeverFits exactly when `plan()` rejects
the gang as NeverFits on an empty cluster with the same nodes, with the same message."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from policies.model import QueueTree, Snapshot
from policies.planner import NeverFitsScreen, plan
from tests.strategies import gangs, nodes, queue_trees


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_the_webhook_says_never_fits_exactly_when_the_planner_rejects_so(
    data: st.DataObject,
) -> None:
    cluster = data.draw(nodes())
    tree = data.draw(queue_trees())
    pending = data.draw(gangs(tree, "ns"))
    screen = NeverFitsScreen(tree, cluster)  # one screen for every gang, as the webhook keeps
    for gang in pending:
        decided = plan(Snapshot(cluster, tree, [], [gang], 0.0)).reason(gang.id)
        expected = decided if decided is not None and decided.code == "NeverFits" else None
        assert screen.verdict(gang) == expected, gang


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_before_the_nodes_are_known_only_the_quota_rule_applies(data: st.DataObject) -> None:
    """Without nodes, the verdict is the planner's for the same queues made node-blind."""
    cluster = data.draw(nodes())
    tree = data.draw(queue_trees())
    blind = QueueTree.build(replace(queue, node_fit=False) for queue in tree)
    pending = data.draw(gangs(tree, "ns"))
    screen = NeverFitsScreen(tree, None)
    for gang in pending:
        decided = plan(Snapshot(cluster, blind, [], [gang], 0.0)).reason(gang.id)
        expected = decided if decided is not None and decided.code == "NeverFits" else None
        assert screen.verdict(gang) == expected, gang
