"""Issue 32 §3: mutants of ``group_records.py`` the core tests did not reach.

``GroupTransaction.to_dict``/``from_dict`` carry a group transaction from the task that
began it to the ones that commit or abort it (Airflow's XCom, as JSON); only the
Airflow tests used them, which mutmut's test set leaves out.  Here the round trip is
checked the way it is used: the description, through JSON, commits the group; its
times survive (an expired one is refused); a damaged description is one clear error.
Real local folders.
"""

from __future__ import annotations

import json

import pytest

from airflow_tpc import TpcError
from airflow_tpc.errors import InvalidState, TransactionExpired
from airflow_tpc.group import GroupTransaction

from .test_groups import NEW, _as_cut, _cut, _group, _stage, local  # noqa: F401


def _through_json(gtxn: GroupTransaction) -> GroupTransaction:
    return GroupTransaction.from_dict(json.loads(json.dumps(gtxn.to_dict())))


def test_a_group_transaction_handed_over_as_json_commits_the_group(local):  # noqa: F811
    group = _group(local)
    gtxn = _stage(group, "5", NEW)
    doc = json.loads(json.dumps(gtxn.to_dict()))
    assert doc == {"namespace": "etl", "group": group.uri, "epoch": "5", "attempt": 1,
                   "started_at": gtxn.started_at, "timeout_s": gtxn.timeout_s,
                   "members": {n: gtxn.member(n).to_dict() for n in ("daily", "events")}}
    assert list(doc["members"]) == ["daily", "events"]  # one spelling, whatever the order
    again = _through_json(gtxn)
    assert again == gtxn and again.members == gtxn.members
    assert _group(local).commit(again).outcome == "committed"
    assert _cut(_group(local)) == {"5": _as_cut(NEW)}


def test_a_handed_over_group_transaction_keeps_its_clock(local):  # noqa: F811
    """started_at and timeout_s come through: past its timeout it is refused as any."""
    group = _group(local, timeout_s=60)
    gtxn = _stage(group, "5", NEW)
    again = _through_json(gtxn)
    assert (again.started_at, again.timeout_s) == (gtxn.started_at, 60.0)
    assert not again.expired(gtxn.started_at + 60) and again.expired(gtxn.started_at + 61)
    assert again.age(gtxn.started_at + 7) == 7
    stale = GroupTransaction.from_dict({**again.to_dict(), "started_at": 0.0})
    with pytest.raises(InvalidState, match="does not match its begin record"):
        _group(local, timeout_s=60).commit(stale)  # another start: not this transaction
    assert _cut(_group(local)) == {}


def test_a_handed_over_group_transaction_past_its_timeout_is_refused(local):  # noqa: F811
    group = _group(local, timeout_s=0.0)  # expired as soon as it began
    again = _through_json(_stage(group, "5", NEW))
    with pytest.raises(TransactionExpired, match="past its 0 s timeout"):
        _group(local, timeout_s=0.0).commit(again)
    assert _cut(_group(local)) == {}


@pytest.mark.parametrize("key", ["namespace", "group", "epoch", "attempt", "started_at",
                                 "timeout_s", "members"])
def test_a_group_transaction_description_missing_a_field_is_one_clear_error(local, key):  # noqa: F811
    doc = _stage(_group(local), "5", NEW).to_dict()
    del doc[key]
    with pytest.raises(TpcError, match=rf"not a group transaction description: missing or "
                                       rf"bad '{key}'"):
        GroupTransaction.from_dict(doc)


@pytest.mark.parametrize("change", [{"attempt": "x"}, {"started_at": "soon"},
                                    {"members": "events"}, {"epoch": "../5"},
                                    {"members": {"events": {"epoch": "5"}}}])
def test_a_damaged_group_transaction_description_is_one_clear_error(local, change):  # noqa: F811
    doc = {**_stage(_group(local), "5", NEW).to_dict(), **change}
    with pytest.raises(TpcError, match="not a group transaction description|not a "
                                       "transaction description|epoch|attempt"):
        GroupTransaction.from_dict(doc)


def test_an_unknown_member_name_is_one_clear_error(local):  # noqa: F811
    gtxn = _stage(_group(local), "5", NEW)
    with pytest.raises(TpcError, match=r"group .*etl has no member 'weekly' \(members: "
                                       r"daily, events\)"):
        gtxn.member("weekly")
