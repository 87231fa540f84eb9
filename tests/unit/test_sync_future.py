"""The future the blocking publish_async returns builds its condition only when needed,
and still behaves as a concurrent.futures.Future: settled once, waited on, cancelled,
called back, and seen by wait() and as_completed()."""

from __future__ import annotations

import concurrent.futures
import threading
import time

import pytest

from liftbridge_nats.sync import Publisher
from liftbridge_nats.sync._future import LazyFuture
from liftbridge_nats.testing import MemoryTransport


def test_settled_before_anyone_looks_needs_no_condition() -> None:
    future: LazyFuture[int] = LazyFuture()
    assert isinstance(future, concurrent.futures.Future)
    future.set_result(7)
    assert future.done() and future.result() == 7 and future.exception() is None
    # Nor its lists of waiters and callbacks: a settled future the caller keeps holds
    # its outcome and its state only.
    assert not {"_condition", "_waiters", "_done_callbacks"} & set(vars(future))
    assert not future.cancel() and not future.cancelled() and not future.running()
    with pytest.raises(concurrent.futures.InvalidStateError):
        future.set_result(8)
    with pytest.raises(concurrent.futures.InvalidStateError):
        future.set_exception(ValueError("late"))
    assert future.result() == 7


def test_an_error_is_raised_and_returned() -> None:
    future: LazyFuture[int] = LazyFuture()
    error = ValueError("boom")
    future.set_exception(error)
    assert future.exception() is error
    with pytest.raises(ValueError, match="boom"):
        future.result()
    with pytest.raises(concurrent.futures.InvalidStateError):
        future.set_result(1)


def test_pending_waits_time_out_and_cancel_wins_over_a_late_result() -> None:
    future: LazyFuture[int] = LazyFuture()
    assert not future.done()
    with pytest.raises(concurrent.futures.TimeoutError):
        future.result(0.01)
    with pytest.raises(concurrent.futures.TimeoutError):
        future.exception(0.01)
    assert future.cancel() and future.cancelled() and future.done()
    with pytest.raises(concurrent.futures.InvalidStateError):
        future.set_result(1)
    with pytest.raises(concurrent.futures.CancelledError):
        future.result()


def test_callbacks_run_once_whether_added_before_or_after() -> None:
    seen: list[tuple[str, int]] = []
    future: LazyFuture[int] = LazyFuture()
    future.add_done_callback(lambda f: seen.append(("before", f.result())))
    future.set_result(3)
    future.add_done_callback(lambda f: seen.append(("after", f.result())))
    assert seen == [("before", 3), ("after", 3)]


def test_wait_and_as_completed_see_settled_and_pending_futures() -> None:
    done: LazyFuture[int] = LazyFuture()
    done.set_result(1)
    pending: LazyFuture[int] = LazyFuture()
    finished, not_done = concurrent.futures.wait([done, pending], timeout=0.01)
    assert finished == {done} and not_done == {pending}
    threading.Timer(0.05, pending.set_result, (2,)).start()
    assert sorted(f.result() for f in concurrent.futures.as_completed([done, pending], 5)) == [
        1,
        2,
    ]
    late: LazyFuture[int] = LazyFuture()
    threading.Timer(0.05, late.set_exception, (ValueError("x"),)).start()
    finished, _ = concurrent.futures.wait([late], 5, concurrent.futures.FIRST_EXCEPTION)
    assert finished == {late}


@pytest.mark.parametrize("how", ["result", "exception", "wait", "callback"])
def test_a_waiter_racing_the_settlement_is_always_woken(how: str) -> None:
    # The waiter builds the condition while another thread settles the future: whichever
    # comes first, the waiter must return at once, never at its timeout.
    for _ in range(300):
        future: LazyFuture[int] = LazyFuture()
        start = threading.Barrier(2)
        woken = threading.Event()

        def settle(future: LazyFuture[int] = future, start: threading.Barrier = start) -> None:
            start.wait()
            future.set_result(5)

        setter = threading.Thread(target=settle)
        setter.start()
        start.wait()
        began = time.monotonic()
        if how == "result":
            assert future.result(10) == 5
        elif how == "exception":
            assert future.exception(10) is None
        elif how == "wait":
            assert concurrent.futures.wait([future], 10).done == {future}
        else:
            future.add_done_callback(lambda _f: woken.set())  # noqa: B023 (called at once or soon)
            assert woken.wait(10)
        assert time.monotonic() - began < 5
        setter.join()
        assert future.result() == 5


def test_cancel_racing_the_settlement_settles_exactly_once() -> None:
    for _ in range(300):
        future: LazyFuture[int] = LazyFuture()
        start = threading.Barrier(2)
        refused: list[bool] = []

        def settle(
            future: LazyFuture[int] = future,
            start: threading.Barrier = start,
            refused: list[bool] = refused,
        ) -> None:
            start.wait()
            try:
                future.set_result(1)
            except concurrent.futures.InvalidStateError:
                refused.append(True)

        setter = threading.Thread(target=settle)
        setter.start()
        start.wait()
        cancelled = future.cancel()
        setter.join()
        assert cancelled == bool(refused) == future.cancelled()
        if not cancelled:
            assert future.result() == 1


def test_publish_async_futures_are_lazy_and_complete() -> None:
    with Publisher(MemoryTransport(), metrics=False, tracing=False) as pub:
        futures = [pub.publish_async("s", b"%d" % i) for i in range(50)]
        assert all(isinstance(f, concurrent.futures.Future) for f in futures)
        pub.flush(5)
        assert [f.result().offset for f in futures] == list(range(50))  # type: ignore[union-attr]
        assert all("_condition" not in vars(f) for f in futures)  # nobody had to wait
        late = pub.publish_async("s", b"late")
        assert next(concurrent.futures.as_completed([late], 5)) is late
