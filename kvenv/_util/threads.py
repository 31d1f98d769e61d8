"""A few threads over a list, without ``concurrent.futures``: that package imports ``logging``
(and with it ``traceback``, ``tokenize``, ``string``...), about 10 ms of a warm apply recalled
into a new root (issue 13), which needs nothing but to run one function on a handful of items
by two or three threads."""

from __future__ import annotations

import threading

TYPE_CHECKING = False
if TYPE_CHECKING:  # no ``typing`` at run time
    from collections.abc import Callable, Sequence
    from typing import TypeVar

    T = TypeVar("T")
    R = TypeVar("R")


def thread_map(fn: Callable[[T], R], items: Sequence[T], jobs: int, name: str) -> list[R]:
    """``[fn(item) for item in items]``, the items taken in order by ``jobs`` threads (named
    ``name-N``). The first exception any call raised is raised here once every thread has
    stopped; after it, the threads take no new item. An interrupt of the calling thread while
    it waits (Ctrl-C) is raised once the threads have finished the items they hold, so the
    caller's clean-up never races them."""
    if jobs <= 1 or len(items) <= 1:
        return [fn(item) for item in items]
    results: dict[int, R] = {}
    failures: list[BaseException] = []
    lock = threading.Lock()
    upcoming = iter(range(len(items)))

    def work(done: threading.Event) -> None:
        try:
            while True:
                with lock:
                    index = None if failures else next(upcoming, None)
                if index is None:
                    return
                try:
                    results[index] = fn(items[index])
                except BaseException as exc:  # re-raised in the caller's thread
                    with lock:
                        failures.append(exc)
                    return
        finally:
            done.set()

    # Waited for by events, not join(): a join() interrupted by Ctrl-C marks the thread it
    # waited for as stopped while it still runs (CPython's bpo-45274 handling), and a second
    # join() would then return at once.
    finished = [threading.Event() for _ in range(min(jobs, len(items)))]
    threads = [
        threading.Thread(target=work, args=(done,), name=f"{name}-{n}", daemon=True)
        for n, done in enumerate(finished)
    ]
    for thread in threads:
        thread.start()
    try:
        for done in finished:
            done.wait()
    except BaseException as exc:  # Ctrl-C while waiting: the threads end their current item
        with lock:
            failures.append(exc)  # and take no new one
        for done in finished:
            done.wait()
        raise
    finally:
        for thread in threads:
            thread.join()  # each has set its event: only its last steps are left
    if failures:
        raise failures[0]
    return [results[index] for index in range(len(items))]
