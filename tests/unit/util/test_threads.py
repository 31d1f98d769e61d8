"""kvenv._util.threads.thread_map: ``[fn(x) for x in items]`` by a few threads, in order, the
first failure raised once every thread stopped."""

from __future__ import annotations

import threading
import time

import pytest

from kvenv._util.threads import thread_map


@pytest.mark.parametrize("jobs", [1, 2, 3, 8])
def test_results_come_in_the_items_order(jobs: int) -> None:
    def slow_square(n: int) -> int:
        time.sleep(0.001 * (n % 3))  # finish out of order
        return n * n

    assert thread_map(slow_square, list(range(50)), jobs, "t") == [n * n for n in range(50)]


def test_several_threads_share_the_work_and_are_named() -> None:
    seen: set[str] = set()
    barrier = threading.Barrier(2, timeout=5)

    def record(n: int) -> int:
        seen.add(threading.current_thread().name)
        if n < 2:
            barrier.wait()  # the first two items run at once: two threads are working
        return n

    assert thread_map(record, list(range(10)), 2, "kvenv-test") == list(range(10))
    assert seen == {"kvenv-test-0", "kvenv-test-1"}


@pytest.mark.parametrize("jobs", [1, 2])
def test_the_first_failure_is_raised_and_no_new_item_is_taken_after_it(jobs: int) -> None:
    started: list[int] = []
    lock = threading.Lock()
    failed = threading.Event()

    def fail_at_three(n: int) -> int:
        with lock:
            started.append(n)
        if n == 3:
            failed.set()
            raise ValueError("three")
        failed.wait(0.02)  # the other calls are slow until the failure
        return n

    with pytest.raises(ValueError, match="three"):
        thread_map(fail_at_three, list(range(100)), jobs, "t")
    # another thread may have been running one item, and taken one more before the failure
    # was recorded; none after that
    assert max(started) <= 3 + jobs
    assert not [t for t in threading.enumerate() if t.name.startswith("t-")]  # all stopped


def test_no_items_and_one_item() -> None:
    assert thread_map(str, [], 4, "t") == []
    assert thread_map(str, [7], 4, "t") == ["7"]


def test_an_interrupt_while_waiting_lets_the_threads_finish_their_items_first() -> None:
    """Ctrl-C in the calling thread: raised once every thread has finished the item it held,
    and no new item is taken (the caller's clean-up never races a thread still working)."""
    import signal

    started: list[int] = []
    finished: list[int] = []
    lock = threading.Lock()

    def slow(n: int) -> int:
        with lock:
            started.append(n)
        if n == 2:
            # Ctrl-C, delivered to the calling thread while it waits in join()
            signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)
        time.sleep(0.05)
        with lock:
            finished.append(n)
        return n

    with pytest.raises(KeyboardInterrupt):
        thread_map(slow, list(range(50)), 2, "t")
    assert sorted(started) == sorted(finished)  # nothing still running when it was raised
    assert max(started) <= 4
    assert not [t for t in threading.enumerate() if t.name.startswith("t-")]
