"""muster's pure policy core: resources, the model, and the planner.

Standard library and networkx only; never kubernetes or kopf. See docs/dev/policy-interface.md.
"""

from policies.decisions import REASON_CODES, Admission, Decisions, PendingReasons, Reason
from policies.model import (
    AdmittedGang,
    Backoff,
    BorrowWithinCohort,
    Gang,
    Node,
    PodSet,
    PolicyError,
    Preemption,
    Queue,
    QueueTree,
    SizeRatio,
    Snapshot,
    SubmitStamp,
    Taint,
    Toleration,
)
from policies.planner import Planner, plan
from policies.preemption import parse_preemption
from policies.resources import QuantityError, Resources, format_quantity, parse_quantity
from policies.strategies import AdmissionPolicy, get_policy, register_policy

__all__ = [
    "REASON_CODES",
    "Admission",
    "AdmissionPolicy",
    "AdmittedGang",
    "Backoff",
    "BorrowWithinCohort",
    "Decisions",
    "Gang",
    "Node",
    "PendingReasons",
    "Planner",
    "PodSet",
    "PolicyError",
    "Preemption",
    "QuantityError",
    "Queue",
    "QueueTree",
    "Reason",
    "Resources",
    "SizeRatio",
    "Snapshot",
    "SubmitStamp",
    "Taint",
    "Toleration",
    "format_quantity",
    "get_policy",
    "parse_preemption",
    "parse_quantity",
    "plan",
    "register_policy",
]
