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
    stopped; after it, the threads take no new item."""
    if jobs <= 1 or len(items) <= 1:
        return [fn(item) for item in items]
    results: list[R | None] = [None] * len(items)
    failures: list[BaseException] = []
    lock = threading.Lock()
    upcoming = iter(range(len(items)))

    def work() -> None:
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

    threads = [
        threading.Thread(target=work, name=f"{name}-{n}", daemon=True)
        for n in range(min(jobs, len(items)))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]
    return results  # type: ignore[return-value]  # every index was filled
