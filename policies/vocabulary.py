"""The names users and components see on objects: labels and annotations under muster.dev/.

One place for them, so the webhook that writes a name and the controller that reads it cannot
drift apart. See docs/dev/architecture.md, "Interfaces users see".
"""

from __future__ import annotations

from typing import Final

QUEUE: Final = "muster.dev/queue"
"""Label (set by users) naming the queue; also an annotation stamped by the webhook."""
MIN_MEMBERS: Final = "muster.dev/min-members"
"""Annotation or label: the gang's elastic minimum (default: its size)."""
CLOG_TIMEOUT: Final = "muster.dev/clog-timeout"
"""Annotation or label: per-gang clog timeout override (a duration). A MiniCluster's reaches its
Job as a label, through `spec.jobLabels`."""
PRIORITY: Final = "muster.dev/priority"
"""Annotation or label: the gang's priority in its queue, 0..1e9, higher first (default 0)."""
PRIORITY_MAX: Final = 1_000_000_000
ELASTIC_AFTER: Final = "muster.dev/elastic-after"
"""Annotation or label: how long an elastic gang waits for its full size before it may be
admitted smaller (a duration; default 0 = at once)."""
TOPOLOGY_REQUIRED: Final = "muster.dev/topology-required"
"""Annotation or label: a topology level (node label key, or its name part: rack) within one
domain of which every pod of the gang must run; the gang waits for room in one."""
TOPOLOGY_PREFERRED: Final = "muster.dev/topology-preferred"
"""Annotation or label: a topology level within one domain of which the gang's pods should run
if one has room; else in as few domains of it as free capacity allows."""
SUBMITTED: Final = "muster.dev/submitted"
"""Annotation stamped by the webhook: the gang's place in the total submission order."""
ADMITTED: Final = "muster.dev/admitted"
"""Annotation written at admission (the PATCH that unsuspends)."""
PLACEMENT: Final = "muster.dev/placement"
"""Annotation written at admission: where the planner put the gang's pods (`node=pods,...`); the
pod template is pinned to these nodes until the gang is evicted (see policies/kinds/pinning.py)."""
RESTORE: Final = "muster.dev/restore"
"""Annotation written at admission: the Job fields admission changed (parallelism, completions,
the pod template's affinity) as they were, JSON; put back and removed at eviction."""
EVICTIONS: Final = "muster.dev/evictions"
"""Annotation: how many times the gang was evicted."""
REQUEUE_AT: Final = "muster.dev/requeue-at"
"""Annotation written at eviction: RFC3339 time before which the gang is not planned again."""
EVICTED_REASON: Final = "muster.dev/evicted-reason"
"""Annotation written at eviction: why (Clogged, Deadlock, BelowMinimum, Preempted)."""
PREEMPTIONS: Final = "muster.dev/preemptions"
"""Annotation written at preemption: how many times the gang was preempted (not evictions: a
preemption has no backoff and does not count toward the backoff limit)."""
PREEMPTED_BY: Final = "muster.dev/preempted-by"
"""Annotation written at preemption: the planner's message, naming the preemptor and the rule."""
STATE: Final = "muster.dev/state"
"""Annotation: Failed (`policies.gangstate.FAILED`) once the backoff limit is reached, or once
the gang has been rejected (it can never be admitted) for the controller's grace."""
FAILED_REASON: Final = "muster.dev/failed-reason"
"""Annotation written with `STATE: Failed` for a gang that can never be admitted: the planner's
reason code and message (e.g. `NeverFits: never fits: needs 40 cpu, ...`)."""
GANG: Final = "muster.dev/gang"
"""Pod-template label: the gang's name, so its pods can be listed with a selector."""
POD_SET: Final = "muster.dev/pod-set"
"""Label the webhook puts on each pod template of a kind with several (a JobSet's replicated
Jobs): the pod set its pods belong to, so the controller places each pod where its set was
planned."""
RESIZED_FROM: Final = "muster.dev/resized-from"
"""Annotation muster writes on a MiniCluster with its `spec.size` when it admits the gang
smaller (elastic): the size it was resized from, which its restore puts back (and removes this).
The webhook lets `spec.size` change only by these two steps (`MiniClusterKind.admission_change`)."""
GANG_KIND: Final = "muster.dev/gang-kind"
"""Annotation on a Job that is part of a larger gang (MiniCluster)."""
POD_GROUP: Final = "muster.dev/pod-group"
"""Pod label (set by users, or by the operator that makes the pods): the pod is one of the pod
group of that name, a gang of plain pods (policies/kinds/podgroup.py). Only pods carrying it are
sent to muster's webhook for pods."""
POD_GROUP_SIZE: Final = "muster.dev/pod-group-size"
"""Pod annotation or label: how many pods the pod group has in all; every pod of the group says
the same. The group waits until that many of its pods exist."""
POD_GROUP_TIMEOUT: Final = "muster.dev/pod-group-timeout"
"""Pod annotation or label: how long a pod group may wait for all of its pods to exist (a
duration; default 10m) before muster marks it Failed."""
GANG_RECORD: Final = "muster.dev/gang-record"
"""Label on a GangRecord (muster.dev/v1alpha1): the kind of the gang it records (PodGroup). A
gang whose gang object is a set of pods keeps what muster decided (admission, placement,
evictions, failure) on its record, which outlives the pods an eviction deletes."""
GANG_RUNTIME: Final = "muster.dev/gang-runtime"
"""Pod annotation read by the kwok gang runner: how long the gang works once all of its minimum
members run (until then its pods hold their nodes and wait, as MPI ranks do)."""
COMPLETE_AT: Final = "muster.dev/complete-at"
"""Pod annotation (RFC3339) written by the kwok gang runner; kwok completes the pod then."""
RUNTIME: Final = "muster.dev/runtime"
"""Pod annotation read by kwok Stages in tests and simulation: how long a pod runs."""

CONTROLLER_WRITTEN: Final = (
    ADMITTED,
    PLACEMENT,
    RESTORE,
    EVICTIONS,
    REQUEUE_AT,
    EVICTED_REASON,
    PREEMPTIONS,
    PREEMPTED_BY,
    STATE,
    FAILED_REASON,
    RESIZED_FROM,
)
"""Annotations only muster's controller writes (admission, eviction, preemption, failure). A new
Job that carries one (a copy of another Job's stored manifest) is refused at create: the
controller would take it for admitted, evicted or failed."""
MAX_INDEXED_PODS: Final = 100_000
"""Kubernetes' bound on an Indexed Job's parallelism (and so on a MiniCluster's size)."""

MAX_INT32: Final = 2**31 - 1
"""The largest count Kubernetes stores in a workload's int32 fields (parallelism, completions,
replicas, a MiniCluster's size)."""
