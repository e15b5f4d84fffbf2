"""`JobStore.unfinished` (the keys the admit loop's passes walk) is, after any sequence of watch
events, exactly the keys of the records not finished, in the store's order."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from admission.jobstore import JobStore
from policies.kinds import JOB
from policies.vocabulary import SUBMITTED
from tests import builders

NAMES = ("a", "b", "c", "d")

EVENTS = st.lists(
    st.tuples(st.sampled_from(("put", "remove")), st.sampled_from(NAMES), st.booleans()),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(EVENTS)
def test_unfinished_holds_the_records_not_finished_in_order(
    events: list[tuple[str, str, bool]],
) -> None:
    store = JobStore()
    for version, (what, name, finished) in enumerate(events, start=1):
        key = f"ns/{name}"
        if what == "remove":
            store.remove(key)
            continue
        status = {"conditions": [{"type": "Complete", "status": "True"}]} if finished else None
        body = builders.job(
            name,
            "q",
            namespace="ns",
            suspend=not finished,
            annotations={SUBMITTED: builders.stamp(version, 1_800_000_000.0)},
            resource_version=version,
            status=status,
        )
        store.put(key, JOB, body, store.get(key), 1_800_000_000.0)
        assert store[key].finished == finished
    assert list(store.unfinished) == [k for k, r in store.items() if not r.finished]
    assert list(store.unfinished_records()) == [r for r in store.values() if not r.finished]
    assert all(store.unfinished[k] is store[k] for k in store.unfinished)
