"""One adapter per workload kind, owning both directions: the only readers of the
`muster.dev/*` fields and of a gang's queue, size, minimum and pod sets, and the writers of what
holding, releasing, evicting and restoring a gang changes on its objects.

The webhook refuses what these functions refuse, and the controller keeps a gang waiting with
the same message, so the two cannot disagree (see `tests/unit/test_kind_fields.py`, which walks
every field through both). Pure: plain dicts in, values, patches or `FieldError` out.

- `kind`: the `Kind` protocol every kind implements; `registry`: the kinds muster admits
  (`KINDS`, `kind_named`);
- `job`, `minicluster`, `jobset`: the kinds;
- `fields`: the gang fields every kind carries (queue, min-members, priority, elastic-after,
  clog-timeout), annotation first, else label;
- `podtemplate`: what one pod template asks of a node; `reading`: a gang object's gang, pod
  sets and admission marks, for every kind;
- `pinning`, `release`: what a release writes on a gang object and how eviction puts it back.
"""

from policies.kinds.fields import FieldError, GangFields, queue_of, read_gang_fields
from policies.kinds.job import (
    JOB,
    checked_job_gang_size,
    job_fields,
    job_gang_size,
    job_size_of,
    refuse_controller_annotations,
)
from policies.kinds.jobset import JOBSET
from policies.kinds.kind import ApiKind, Kind, KindName, KindStatus, PodTemplate
from policies.kinds.minicluster import MINICLUSTER, minicluster_fields, minicluster_job_labels
from policies.kinds.registry import KINDS, kind_named

__all__ = [
    "JOB",
    "JOBSET",
    "KINDS",
    "MINICLUSTER",
    "ApiKind",
    "FieldError",
    "GangFields",
    "Kind",
    "KindName",
    "KindStatus",
    "PodTemplate",
    "checked_job_gang_size",
    "job_fields",
    "job_gang_size",
    "job_size_of",
    "kind_named",
    "minicluster_fields",
    "minicluster_job_labels",
    "queue_of",
    "read_gang_fields",
    "refuse_controller_annotations",
]
