"""policies.plan decides exactly as before its speed-ups (issue 3).

The expected digests were computed by the planner as it was before the performance work: the
same admissions in the same order with the same placements, and the same reason (code and
message) for every other gang. A change here means a change of decisions, not of speed: if it
is intended, say so in the commit and recompute the digests. Recomputed once on purpose, for
reservations in policy order, shares over the resources a gang asks for, and the
starvation bound of big gangs (issue 13). Recomputed again for reasons only: an aged holder
that waits for quota or the size-ratio slot says it holds the reservation (11 digests; every
admission, placement and rejection the same). Recomputed for issue 33 (11 digests, every one of
plain and mixed but plain-1-fifo and the strict-fifo ones): the aged big gang that holds the
reservation is that of the queue lowest in share and holds its queue's lent nominal quota
(policies/quotahold.py), queues below their fair share but above its queue are held back
too, a queue that borrows is not one for resources no quota governs, and reclaimWithinCohort
and fairShare preempt less (policies/preemption.py): as many gangs admitted in 8 of the 11
(other ones), 10 more in mixed-3-fifo, 1 to 3 fewer in plain-2-drf, plain-2-fifo and
plain-3-drf.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json

import pytest

from muster.bench.plan import build_snapshot
from policies import (
    AdmittedGang,
    Decisions,
    Gang,
    Queue,
    QueueTree,
    SizeRatio,
    Snapshot,
    SubmitStamp,
    plan,
)


def _digest(decisions: Decisions) -> str:
    data = {
        "admitted": [
            [a.gang_id, a.queue, a.size, sorted(a.placement.items())] for a in decisions.admitted
        ],
        "pending": list(decisions.pending.items()),
        "rejected": list(decisions.rejected.items()),
    }
    return hashlib.sha256(json.dumps(data).encode()).hexdigest()[:16]


def _mixed(snapshot: Snapshot) -> Snapshot:
    """The bench snapshot with every rule in play: size ratio Serialize and Reject, a queue
    without node fit, gangs naming a cohort or an unknown queue, a big gang admitted and not
    running yet (so big gangs wait behind it)."""
    queues: list[Queue] = []
    for i, queue in enumerate(snapshot.queues):
        if queue.parent is None:
            queues.append(queue)
        elif i % 7 == 0:
            queues.append(dataclasses.replace(queue, size_ratio=SizeRatio(0.01, "Reject")))
        elif i % 7 == 1:
            queues.append(dataclasses.replace(queue, size_ratio=SizeRatio(0.005)))
        elif i % 11 == 0:
            queues.append(dataclasses.replace(queue, node_fit=False))
        else:
            queues.append(queue)
    pending = list(snapshot.pending)
    for k in range(0, len(pending), 97):
        target = "cohort-0" if k % 2 else "no-such-queue"
        pending[k] = dataclasses.replace(pending[k], queue=target)
    return dataclasses.replace(snapshot, queues=QueueTree.build(queues), pending=pending)


def _blocked(snapshot: Snapshot) -> Snapshot:
    """A big gang admitted a moment ago and not running: big gangs are serialized behind it."""
    first = snapshot.pending[0]
    big = Gang(
        "running/big",
        "q001",
        first.pod_requests,
        64,
        submitted=SubmitStamp(-10.0, 0, "big"),
    )
    admitted = [*snapshot.admitted, AdmittedGang(big, 64, {}, snapshot.now - 5.0)]
    return dataclasses.replace(snapshot, admitted=admitted)


EXPECTED = {
    ("plain", 1, "drf"): "b86b4cec6cea3990",
    ("plain", 1, "fifo"): "e4c08f88a39cff22",
    ("plain", 1, "strict-fifo"): "d8765b49ac453a9a",
    ("plain", 2, "drf"): "490df9fe54721454",
    ("plain", 2, "fifo"): "15330f39d85dee13",
    ("plain", 2, "strict-fifo"): "0c96106bef2d3402",
    ("plain", 3, "drf"): "f03a540b09cefe2a",
    ("plain", 3, "fifo"): "5dfa4f56cc23f2f3",
    ("plain", 3, "strict-fifo"): "87bd384023cd0b8f",
    ("mixed", 1, "drf"): "419e8bbb3b96d1f9",
    ("mixed", 1, "fifo"): "da2c0d9c2ea2e0eb",
    ("mixed", 1, "strict-fifo"): "0c0a118fc11fc656",
    ("mixed", 2, "drf"): "1fa1ee8733b6a195",
    ("mixed", 2, "fifo"): "7253d48d26e788ef",
    ("mixed", 2, "strict-fifo"): "63eff40124aaeb1b",
    ("mixed", 3, "drf"): "98d244af78164e3d",
    ("mixed", 3, "fifo"): "d060d774b4fcbf70",
    ("mixed", 3, "strict-fifo"): "7effb9fcd4e292c7",
    ("blocked", 1, "drf"): "7cc87f08a7766c9f",
    ("blocked", 1, "fifo"): "4f38ef9d43406e57",
    ("blocked", 1, "strict-fifo"): "49c280a28874d616",
    ("blocked", 2, "drf"): "40e0ec2230cd2241",
    ("blocked", 2, "fifo"): "da4a92508e2be743",
    ("blocked", 2, "strict-fifo"): "f4b3902e6dd8049e",
    ("blocked", 3, "drf"): "31046433a9591a1a",
    ("blocked", 3, "fifo"): "a0918246add9b518",
    ("blocked", 3, "strict-fifo"): "49bbdb16cebb7d38",
    ("bench", 1, "drf"): "a717ad38d60305fe",
    ("bench", 1, "fifo"): "e86e50da4bff27ff",
    ("bench", 1, "strict-fifo"): "471137304118a444",
}


def _snapshot(variant: str, seed: int) -> Snapshot:
    if variant == "bench":  # the benchmark's own snapshot at 10k pending
        return build_snapshot(10_000, 1_000, 100, seed)
    snapshot = build_snapshot(600, 60, 20, seed)
    if variant == "mixed":
        return _mixed(snapshot)
    if variant == "blocked":
        return _blocked(snapshot)
    return snapshot


@pytest.mark.parametrize(("variant", "seed", "policy"), sorted(EXPECTED))
def test_decisions_unchanged(variant: str, seed: int, policy: str) -> None:
    decisions = plan(_snapshot(variant, seed), policy)
    assert _digest(decisions) == EXPECTED[variant, seed, policy]
