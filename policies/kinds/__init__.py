"""One adapter per job kind: the only readers of the `muster.dev/*` fields and of a gang's
size, minimum, priority and timeouts.

The webhook refuses what these functions refuse, and the controller keeps a gang waiting with
the same message, so the two cannot disagree (see `tests/unit/test_kind_fields.py`, which walks
every field through both). Pure: plain dicts in, values or `FieldError` out.

- `kind`: the `Kind` protocol the callers use (`JOB`, `MINICLUSTER`, `kind_named`);
- `fields`: the gang fields every kind carries (queue, min-members, priority, elastic-after,
  clog-timeout), annotation first, else label;
- `job`: a batch/v1 Job's gang size and elastic rule;
- `minicluster`: a Flux Operator MiniCluster's size, minimum and the `spec.jobLabels` that carry
  its gang fields to the Job the operator creates.
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
from policies.kinds.kind import KINDS, Kind, KindName, kind_named
from policies.kinds.minicluster import MINICLUSTER, minicluster_fields, minicluster_job_labels

__all__ = [
    "JOB",
    "KINDS",
    "MINICLUSTER",
    "FieldError",
    "GangFields",
    "Kind",
    "KindName",
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
