"""Work queued ahead of need that whoever needs it first runs: a :class:`Claimable` is queued on
a thread pool (speculative prefetch), and the resolver asking for its result before a worker
took it runs it on the spot instead of waiting behind the rest of the queue (issue 13)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Generic, TypeVar

_T = TypeVar("_T")


class Claimable(Generic[_T]):
    """One call, run at most once: by a pool worker, or by the first caller of :meth:`result`
    when no worker has started it."""

    def __init__(self, call: Callable[[], _T]) -> None:
        self.future: Future[_T] = Future()
        self._call = call
        self._claimed = False
        self._lock = threading.Lock()

    def submit_to(self, pool: ThreadPoolExecutor) -> None:
        pool.submit(self.run)

    def run(self) -> None:
        with self._lock:
            if self._claimed:
                return
            self._claimed = True
        self.future.set_running_or_notify_cancel()
        try:
            value = self._call()
        except BaseException as exc:
            self.future.set_exception(exc)
        else:
            self.future.set_result(value)

    def result(self) -> _T:
        self.run()
        return self.future.result()
