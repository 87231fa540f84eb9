"""The chaos run's checker (bench.chaos.checker) on small hand-made histories: a clean
history passes, and each rule fails on a history that breaks it. Also the schedule's
rules, the log parsers and the history file round trip."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from bench.chaos import checker, logs, report
from bench.chaos.history import (
    Fault,
    History,
    HistoryWriter,
    Publish,
    Read,
    Stored,
    Truncation,
    load,
)
from bench.chaos.schedule import Settings, Step, allowed, in_force, make_schedule

DEADLINE = 15.0


def _acked(ident: str, offset: int, *, key: str = "k", start: float, end: float) -> Publish:
    return Publish(ident, key, 0, start, end, offset=offset)


def _clean() -> History:
    """Three acked messages of one key, published one after the other, stored and read;
    a fourth failed with maybe_stored and was stored anyway; a fifth failed for good."""
    history = History(meta={"partitions": 1, "workload_start": 0.0})
    history.publishes = [
        _acked("a", 0, start=1.0, end=1.1),
        _acked("b", 1, start=2.0, end=2.1),
        _acked("c", 2, start=3.0, end=3.1),
        Publish("d", "k", 0, 4.0, 14.0, error="AckTimeoutError", maybe_stored=True),
        Publish("e", "k", 0, 5.0, 5.1, error="NoRespondersError"),
    ]
    history.stored = [Stored("a", 0, 0), Stored("b", 0, 1), Stored("c", 0, 2), Stored("d", 0, 3)]
    history.reads = [Read(i, 0, n, "m0.1", 10.0) for n, i in enumerate("abcd")]
    return history


def _violations(history: History) -> dict[str, int]:
    return checker.check(history, deadline=DEADLINE).violations


def test_a_clean_history_passes_and_counts_maybe_stored_apart() -> None:
    verdict = checker.check(_clean(), deadline=DEADLINE)
    assert verdict.ok, verdict.examples
    assert (verdict.published, verdict.acked, verdict.failed) == (5, 3, 2)
    assert (verdict.maybe_stored, verdict.maybe_stored_and_stored) == (1, 1)
    assert verdict.errors_by_type == {"AckTimeoutError": 1, "NoRespondersError": 1}


def test_an_acked_message_missing_from_the_stream_fails() -> None:
    history = _clean()
    history.stored = [s for s in history.stored if s.id != "b"]
    history.stored = [Stored(s.id, 0, n) for n, s in enumerate(history.stored)]
    violations = _violations(history)
    assert violations["acked_lost"] == 1
    assert checker.check(history, deadline=DEADLINE).unexplained_losses[0].id == "b"


def test_a_loss_a_server_truncation_explains_is_listed_not_failed() -> None:
    history = _clean()
    history.stored = [Stored("a", 0, 0)]
    history.reads = [Read("a", 0, 0, "m0.1", 10.0)]
    # n1 kept offset 0 and cut everything above: b (1) and c (2) are explained.
    history.truncations = [Truncation("n1", 0, 1, "Truncating log ... to HW 0", t=5.0)]
    verdict = checker.check(history, deadline=DEADLINE)
    assert verdict.ok, verdict.examples
    assert sorted(loss.id for loss in verdict.explained_losses) == ["b", "c"]
    assert verdict.explained_losses[0].evidence == ("n1: Truncating log ... to HW 0",)


def test_a_truncation_above_the_offset_elsewhere_or_earlier_explains_nothing() -> None:
    history = _clean()
    history.stored = [Stored("a", 0, 0), Stored("c", 0, 1)]
    history.truncations = [
        Truncation("n1", 0, 2, "kept 1", t=5.0),  # cut from offset 2 on: b (offset 1) stays
        Truncation("n2", 1, 0, "another partition", t=5.0),
        Truncation("n2", 0, 0, "before b was published", t=0.5),
    ]
    verdict = checker.check(history, deadline=DEADLINE)
    assert [loss.id for loss in verdict.unexplained_losses] == ["b"]
    assert verdict.violations["acked_lost"] == 1


def test_an_acked_message_stored_twice_fails() -> None:
    history = _clean()
    history.stored.append(Stored("b", 0, 4))
    violations = _violations(history)
    assert violations["acked_duplicated"] == 1
    assert checker.check(history, deadline=DEADLINE).duplicates == 1


def test_an_acked_message_stored_at_another_offset_fails() -> None:
    history = _clean()
    history.stored = [Stored("a", 0, 0), Stored("c", 0, 1), Stored("b", 0, 2), Stored("d", 0, 3)]
    violations = _violations(history)
    assert violations["acked_moved"] == 2  # b and c swapped places


def test_an_acked_message_the_group_never_read_fails() -> None:
    history = _clean()
    history.reads = [r for r in history.reads if r.id != "c"]
    assert _violations(history) == {"acked_unread": 1}


def test_a_gap_in_the_offsets_fails() -> None:
    history = _clean()
    history.stored[-1] = Stored("d", 0, 5)
    assert _violations(history) == {"offset_gap": 1}


def test_a_repeated_offset_fails() -> None:
    history = _clean()
    history.stored.append(Stored("", 0, 3))
    assert _violations(history) == {"offset_gap": 1}


def test_per_key_order_broken_fails() -> None:
    history = _clean()
    # b was acked before c was published, yet c is stored first.
    history.publishes[1] = _acked("b", 2, start=2.0, end=2.1)
    history.publishes[2] = _acked("c", 1, start=3.0, end=3.1)
    history.stored = [Stored("a", 0, 0), Stored("c", 0, 1), Stored("b", 0, 2), Stored("d", 0, 3)]
    assert _violations(history) == {"key_order": 1}


def test_overlapping_publishes_of_one_key_may_be_stored_in_either_order() -> None:
    history = _clean()
    # c was published before b's ack came back: no order between them.
    history.publishes[1] = _acked("b", 2, start=2.0, end=3.5)
    history.publishes[2] = _acked("c", 1, start=3.0, end=3.1)
    history.stored = [Stored("a", 0, 0), Stored("c", 0, 1), Stored("b", 0, 2), Stored("d", 0, 3)]
    assert checker.check(history, deadline=DEADLINE).ok


def test_order_between_different_keys_is_not_required() -> None:
    history = _clean()
    history.publishes[1] = _acked("b", 2, key="k1", start=2.0, end=2.1)
    history.publishes[2] = _acked("c", 1, key="k2", start=3.0, end=3.1)
    history.stored = [Stored("a", 0, 0), Stored("c", 0, 1), Stored("b", 0, 2), Stored("d", 0, 3)]
    assert checker.check(history, deadline=DEADLINE).ok


def test_a_publish_that_never_ended_or_ended_late_fails() -> None:
    history = _clean()
    history.publishes.append(Publish("f", "k", 0, 6.0, None))
    history.publishes.append(Publish("g", "k", 0, 6.0, 6.0 + DEADLINE + 1, error="AckTimeoutError"))
    verdict = checker.check(history, deadline=DEADLINE)
    assert verdict.violations == {"deadline": 2}
    assert "never ended" in verdict.examples["deadline"][0]


def test_an_error_outside_the_liftbridge_family_fails() -> None:
    history = _clean()
    history.publishes.append(Publish("f", "k", 0, 6.0, 6.1, error="KeyError", typed=False))
    assert _violations(history) == {"untyped_error": 1}


def test_a_message_stored_after_an_error_that_said_not_stored_fails() -> None:
    history = _clean()
    history.stored.append(Stored("e", 0, 4))
    assert _violations(history) == {"stored_after_not_stored": 1}


def test_a_run_where_nothing_was_acked_fails() -> None:
    history = _clean()
    history.publishes = [
        Publish(p.id, p.key, 0, p.start, p.end, error="PublisherClosedError")
        for p in history.publishes
    ]
    history.stored = []
    assert _violations(history) == {"nothing_acked": 1}


def test_the_truncation_lines_of_liftbridge_are_parsed() -> None:
    text = (
        'time="2026-11-28 00:10:34" level=debug msg="Truncating log for partition '
        '[subject=chaos, stream=chaos, partition=2] to HW 41"\n'
        'time="2026-11-28 00:10:35" level=debug msg="Truncating log for partition '
        '[subject=chaos, stream=chaos, partition=0] to 7"\n'
        'time="2026-11-28 00:10:35" level=debug msg="Truncating log for partition '
        '[subject=x, stream=other, partition=0] to 3"\n'
    )
    found = logs.truncations("n1", text, "chaos")
    assert [(t.partition, t.to) for t in found] == [(2, 42), (0, 8)]
    assert found[1].t - found[0].t == 1.0 and found[0].t > 1.7e9
    assert found[0].node == "n1" and "to HW 41" in found[0].line


# Two nodes' logs as in a seed-1128 run: n2 (stale) led epoch 65 while n0 already led
# epoch 80; n2 then followed n0 and its epoch truncation kept everything (to 5).
_AT = "2026-11-28 01:01:05"
_P0 = "[subject=chaos, stream=chaos, partition=0]"
_N2_LOG = (
    f'time="{_AT}" level=debug msg="Server becoming leader for partition {_P0}, epoch: 65"\n'
    f'time="{_AT}" level=debug msg="Updated log leader epoch. New: {{{{epoch:65, offset:1}}}}, '
    f'Previous: {{{{epoch:0, offset:-1}}}} for log {_P0}. Cache now contains 2 entries."\n'
    f'time="{_AT}" level=debug msg="Server becoming follower for partition {_P0}, epoch: 80"\n'
    f'time="{_AT}" level=debug msg="Truncating log for partition {_P0} to {{kept}}"\n'
)
_N0_LOG = (
    'time="2026-11-28 01:00:59" level=debug msg="Server becoming follower for partition '
    f'{_P0}, epoch: 65"\n'
    f'time="{{led}}" level=debug msg="Server becoming leader for partition {_P0}, epoch: 80"\n'
    'time="2026-11-28 01:01:05" level=debug msg="Server becoming leader for partition '
    '[subject=x, stream=other, partition=0], epoch: 80"\n'
)


def _twice(*, kept: int = 5, led: str = _AT) -> tuple[History, list[logs.RoleChange]]:
    """x published once at 01:01:05.8, acked at offset 6; n2's copy at 2, n0's at 6."""
    at = logs.line_time(f'time="{_AT}"') + 0.8
    history = History(meta={"partitions": 1})
    history.publishes = [
        _acked("a", 0, start=at - 9.0, end=at - 8.9),
        _acked("b", 1, start=at - 8.0, end=at - 7.9),
        Publish("w", "k", 0, at - 0.5, at + 9.5, error="AckTimeoutError", maybe_stored=True),
        _acked("x", 6, start=at, end=at + 0.1),
    ]
    history.stored = [
        Stored("a", 0, 0),
        Stored("b", 0, 1),
        Stored("x", 0, 2),  # n2's own copy, kept by its truncation
        Stored("", 0, 3),  # n0's entries n2 fetched after its own
        Stored("", 0, 4),
        Stored("", 0, 5),
        Stored("x", 0, 6),  # n0's copy, the one acked
    ]
    history.reads = [Read(i, 0, n, "m0.1", at + 5) for n, i in enumerate("abx")]
    roles = logs.role_changes("n0", _N0_LOG.format(led=led), "chaos") + logs.role_changes(
        "n2", _N2_LOG.format(kept=kept), "chaos"
    )
    return history, roles


def test_the_leader_follower_and_truncation_lines_are_parsed_in_order() -> None:
    _, roles = _twice()
    assert [(r.node, r.kind, r.value, r.hw) for r in roles] == [
        ("n0", "follower", 65, False),
        ("n0", "leader", 80, False),
        ("n2", "leader", 65, False),
        ("n2", "epoch", 1, False),
        ("n2", "follower", 80, False),
        ("n2", "truncated", 5, False),
    ]
    hw = logs.role_changes("n1", f'msg="Truncating log for partition {_P0} to HW 9"', "chaos")
    assert [(r.kind, r.value, r.hw) for r in hw] == [("truncated", 9, True)]


def test_a_duplicate_two_leaders_at_once_explain_is_listed_not_failed() -> None:
    history, roles = _twice()
    verdict = checker.check(history, deadline=DEADLINE, roles=roles)
    assert verdict.ok, verdict.examples
    (duplicate,) = verdict.explained_duplicates
    assert (duplicate.id, duplicate.offsets) == ("x", (2, 6))
    assert [line.split(":")[0] for line in duplicate.evidence] == ["n2", "n0", "n2", "n2"]
    assert "epoch: 80" in duplicate.evidence[1] and "to 5" in duplicate.evidence[3]
    figures = report.summary(history, verdict)
    assert figures["acked_duplicated_explained"][0]["offsets"] == [2, 6]
    assert "two leaders at once explain" in report.markdown(figures)
    assert verdict.duplicates == 1


@pytest.mark.parametrize(
    "change",
    ["no logs", "truncated below the first copy", "new leader came later", "HW truncation"],
)
def test_a_duplicate_the_logs_do_not_explain_fails(change: str) -> None:
    history, roles = _twice(
        kept=1 if change == "truncated below the first copy" else 5,
        led="2026-11-28 01:01:07" if change == "new leader came later" else _AT,
    )
    if change == "no logs":
        roles = []
    if change == "HW truncation":
        roles = [dataclasses.replace(r, hw=r.kind == "truncated") for r in roles]
    verdict = checker.check(history, deadline=DEADLINE, roles=roles)
    assert verdict.violations == {"acked_duplicated": 1}
    assert verdict.explained_duplicates == []


# A broker that stepped down (n1, epoch 73 -> follower of 97) kept one message of its
# old epoch at offset 3, where n0 records epoch 97 as starting (at 2, a leader's way).
_N1_DIVERGED = (
    f'time="{_AT}" level=debug msg="Server becoming leader for partition {_P0}, epoch: 73"\n'
    f'time="{_AT}" level=debug msg="Server becoming follower for partition {_P0}, epoch: 97"\n'
    f'time="{_AT}" level=debug msg="Truncating log for partition {_P0} to 2"\n'
    f'time="{_AT}" level=debug msg="Updated log leader epoch. New: {{{{epoch:97, offset:4}}}}, '
    f'Previous: {{{{epoch:73, offset:0}}}} for log {_P0}. Cache now contains 2 entries."\n'
)
_N0_EPOCH = (
    f'time="{_AT}" level=debug msg="Updated log leader epoch. New: {{{{epoch:97, '
    f"offset:{{start}}}}}}, Previous: {{{{epoch:73, offset:0}}}} for log {_P0}. Cache now "
    'contains 2 entries."\n'
)


def _diverged(
    *, start: int = 2, read_at: float = 1.0, instead: str = "y"
) -> tuple[History, list[logs.RoleChange]]:
    """x acked at offset 3, y at 5; the group read y (or ``instead``) at offset 3, from
    n1's diverged log, ``read_at`` seconds after n1's follower line."""
    at = logs.line_time(f'time="{_AT}"')
    history = History(meta={"partitions": 1})
    history.publishes = [
        _acked(ident, offset, start=at - 9 + offset, end=at - 8.9 + offset)
        for offset, ident in enumerate("abc")
    ] + [_acked("x", 3, start=at - 2, end=at - 1.9), _acked("y", 5, start=at, end=at + 0.1)]
    history.stored = [
        Stored(ident, 0, offset) for offset, ident in enumerate(["a", "b", "c", "x", "", "y"])
    ]
    reads = [("a", 0), ("b", 1), ("c", 2), (instead, 3), ("y", 5)]
    history.reads = [Read(i, 0, n, "m0.1", at + read_at) for i, n in reads]
    roles = logs.role_changes("n1", _N1_DIVERGED.format(), "chaos") + logs.role_changes(
        "n0", _N0_EPOCH.format(start=start), "chaos"
    )
    return history, roles


def test_an_unread_message_a_diverged_replica_explains_is_listed_not_failed() -> None:
    history, roles = _diverged()
    assert [(r.node, r.kind, r.value, r.epoch) for r in roles if r.kind == "epoch"] == [
        ("n1", "epoch", 4, 97),
        ("n0", "epoch", 2, 97),
    ]
    verdict = checker.check(history, deadline=DEADLINE, roles=roles)
    assert verdict.ok, verdict.examples
    (unread,) = verdict.explained_unread
    assert (unread.id, unread.offset, unread.read_instead) == ("x", 3, "y")
    assert [line.split(":")[0] for line in unread.evidence] == ["n1", "n1", "n1", "n0"]
    figures = report.summary(history, verdict)
    assert figures["acked_unread_explained"][0]["read_instead"] == "y"
    assert "a diverged replica served another" in report.markdown(figures)


@pytest.mark.parametrize(
    "change",
    ["no logs", "the epoch starts elsewhere", "read before the switch", "read a lower message"],
)
def test_an_unread_message_the_logs_do_not_explain_fails(change: str) -> None:
    history, roles = _diverged(
        start=0 if change == "the epoch starts elsewhere" else 2,
        read_at=-5.0 if change == "read before the switch" else 1.0,
        instead="b" if change == "read a lower message" else "y",
    )
    if change == "no logs":
        roles = []
    verdict = checker.check(history, deadline=DEADLINE, roles=roles)
    assert verdict.violations == {"acked_unread": 1}
    assert verdict.explained_unread == []


def test_the_history_file_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    writer = HistoryWriter(path)
    writer.meta(seed=1, deadline=DEADLINE)
    original = _clean()
    events: list[Publish | Read | Stored] = [*original.publishes, *original.reads, *original.stored]
    for event in events:
        writer.record(event)
    writer.record(Fault("kill", "n1", "start", 1.0, (0, 2)))
    writer.close()
    with path.open("a") as file:
        file.write('{"ev": "read", "id"')  # an interrupted run's half line
    again = load(path)
    assert again.meta == {"seed": 1, "deadline": DEADLINE}
    assert again.publishes == original.publishes
    assert again.reads == original.reads
    assert again.faults == [Fault("kill", "n1", "start", 1.0, (0, 2))]


def test_the_report_finds_the_longest_gap_and_the_recoveries() -> None:
    history = _clean()
    history.faults = [
        Fault("pause", "n0", "start", 1.5, (0,)),
        Fault("pause", "n0", "heal", 2.5, (0,)),
    ]
    figures = report.summary(history, checker.check(history, deadline=DEADLINE))
    # From c's ack (3.1) to the last publish (5.0, never acked).
    assert figures["longest_unavailability"] == {"seconds": 1.9, "from": 3.1}
    (row,) = figures["recoveries"]
    assert row["to_ack"] == pytest.approx(0.6) and row["to_read"] == pytest.approx(7.5)
    assert "PASS" in report.markdown(figures)


@pytest.mark.parametrize(
    ("seed", "duration", "kinds"),
    [
        *((seed, 600.0, Settings().kinds) for seed in range(10)),
        # A long run whose rounded times once put a kill's planned end a hair after the
        # next fault's start on the same node.
        (1129, 1800.0, tuple(k for k in Settings().kinds if k != "full_disk")),
    ],
)
def test_every_schedule_keeps_its_rules(seed: int, duration: float, kinds: tuple[str, ...]) -> None:
    settings = Settings(kinds=kinds)
    steps = make_schedule(seed, duration, settings)
    assert steps == make_schedule(seed, duration, settings)  # the seed decides everything
    assert all(s.end <= duration - settings.quiet_tail for s in steps)
    assert {s.kind for s in steps} >= {"kill", "partition", "churn", *kinds[-1:]}
    # The faults in force change only when one starts: checking there checks everything.
    for step in steps:
        assert allowed(in_force(steps, step.at), settings), step


def test_the_schedule_rules_refuse_a_lost_majority() -> None:
    settings = Settings(disk_node=2)

    def step(kind: str, *nodes: int) -> Step:
        return Step(0.0, kind, nodes, 5.0)

    assert allowed([step("pause", 0), step("partition", 0, 1)], settings)
    assert not allowed([step("pause", 0), step("partition", 1, 2)], settings)
    assert not allowed([step("pause", 0), step("isolate", 1)], settings)
    assert not allowed([step("nats_restart"), step("partition", 0, 1)], settings)
    assert not allowed([step("kill", 2)], settings)
    assert not allowed([step("full_disk", 0)], settings)
    assert not allowed(
        [step("pause", 0), step("partition", 0, 1), step("partition", 0, 2)], settings
    )
