"""Files from the Hugging Face Hub at an immutable revision, through the real ``huggingface_hub``.

``hf_hub_download(repo_id, filename, revision=<40-hex>, repo_type=..., local_dir=<kvenv temp
dir>)`` writes into a temporary directory inside kvenv's cache (never the user's Hub cache);
the caller hashes the file, checks sha256 and size, and only then moves it into the cache.

- The endpoint is read from ``HF_ENDPOINT`` when the download starts and passed explicitly
  (``huggingface_hub`` reads it once, at import), and held to the https-only policy.
- ``HF_HUB_OFFLINE`` (or ``TRANSFORMERS_OFFLINE``), read at call time, means no Hub request at
  all: a file not in kvenv's cache is a :class:`FetchError` saying how to get it.
- The token is ``huggingface_hub``'s own (``HF_TOKEN``, else the stored login). kvenv never
  reads it into a file, a message or a log; every message from the Hub client is scrubbed of
  it before it is shown.
- No silent fallback: a Hub failure (unknown revision, missing file, gated or private repo,
  network down) is a :class:`FetchError` naming the repository, revision and file, with the
  https resolve URL in the hint. Retrying the same server through another client would only
  hide the real cause.
- Progress goes to kvenv's callback; the Hub client prints no progress bar and, while kvenv
  downloads, logs nothing (its loggers are set to ERROR and its progress bars are disabled, all
  restored when the last concurrent download ends): a dropped connection gives kvenv's one
  :class:`FetchError`, not the client's "Retrying in 1s" or "Trying to resume download..."
  lines first.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import quote

from kvenv._util.redact import mask, redact_url
from kvenv._util.urls import check_url
from kvenv.errors import Cancelled, FetchError
from kvenv.model.profile import HfSource

DEFAULT_ENDPOINT = "https://huggingface.co"
TOKEN_VARIABLES = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")
_TRUE = {"1", "ON", "YES", "TRUE"}

# First matching class in the exception's MRO decides the explanation.
_EXPLAIN: dict[str, str] = {
    "GatedRepoError": "the repository is gated; accept its terms on the Hub and set HF_TOKEN",
    "DisabledRepoError": "the repository is disabled on the Hub",
    "RepositoryNotFoundError": "repository not found (if it is private, set HF_TOKEN to a token "
    "that can read it)",
    "RevisionNotFoundError": "revision not found in the repository",
    "EntryNotFoundError": "file not found at this revision",
    "OfflineModeIsEnabled": "the Hub client is in offline mode",
    "LocalEntryNotFoundError": "the Hub could not be reached",
}


def hub_offline() -> bool:
    """Whether ``HF_HUB_OFFLINE`` (or ``TRANSFORMERS_OFFLINE``) asks for no Hub access."""
    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return value.strip().upper() in _TRUE


def hub_endpoint() -> str | None:
    """``HF_ENDPOINT`` now (None: the client's default), checked against the https policy."""
    endpoint = os.environ.get("HF_ENDPOINT", "").strip().rstrip("/")
    if not endpoint:
        return None
    check_url(endpoint, what="HF_ENDPOINT")
    return endpoint


def resolve_url(source: HfSource, endpoint: str | None = None) -> str:
    """The https resolve URL of the file (``+`` and other specials percent-encoded)."""
    prefix = "datasets/" if source.repo_type == "dataset" else ""
    base = (endpoint or DEFAULT_ENDPOINT).rstrip("/")
    return f"{base}/{prefix}{source.repo}/resolve/{source.revision}/{quote(source.filename)}"


def describe(source: HfSource) -> str:
    kind = "dataset " if source.repo_type == "dataset" else ""
    return f"{kind}{source.repo}@{source.revision[:12]}/{source.filename}"


def _tokens() -> list[str]:
    """Token values that must never be shown (from the environment and the stored login)."""
    found = [os.environ.get(name, "").strip() for name in TOKEN_VARIABLES]
    try:
        from huggingface_hub import constants

        found.append(Path(constants.HF_TOKEN_PATH).read_text().strip())
    except (ImportError, OSError, UnicodeDecodeError, AttributeError):
        pass
    return [token for token in found if len(token) >= 4]


def download_hf(
    source: HfSource,
    directory: Path,
    *,
    cancel: threading.Event | None = None,
    progress: Callable[[int, int | None], None] | None = None,
) -> Path:
    """Download the file into ``directory`` (a fresh kvenv temp dir) and return its path."""
    endpoint = hub_endpoint()
    what = describe(source)
    try:
        import huggingface_hub
    except ImportError:
        raise FetchError(
            f"cannot download {what}: huggingface_hub is not installed",
            hint="pip install huggingface_hub (a dependency of kvenv), or put the wheel in a "
            "bundle (`kvenv bundle`)",
        ) from None
    bar = _bar_class(cancel, progress)
    try:
        with _quiet_hub():
            path = huggingface_hub.hf_hub_download(
                repo_id=source.repo,
                filename=source.filename,
                revision=source.revision,
                repo_type=source.repo_type,
                local_dir=directory,
                cache_dir=directory / ".hf-cache",
                endpoint=endpoint,
                tqdm_class=bar,
            )
    except FetchError:
        raise
    except Exception as exc:
        raise FetchError(
            f"Hugging Face Hub download failed for {what}: {_explain(exc)}",
            hint="check the repository, revision and file on the Hub: "
            + redact_url(resolve_url(source, endpoint)),
        ) from None
    return Path(str(path))


_quiet_lock = threading.Lock()
_quiet_depth = 0
_quiet_saved: tuple[dict[str, int], bool] = ({}, False)
_HUB_LOGGER = "huggingface_hub"


def _hub_loggers() -> list[logging.Logger]:
    """The client's root logger and every one of its loggers that has a level of its own (a
    child with its own level is not held back by its parent's: an application's logging
    configuration, or ``HF_HUB_VERBOSITY`` style set-ups, can give it one)."""
    out = [logging.getLogger(_HUB_LOGGER)]
    for name, logger in list(logging.Logger.manager.loggerDict.items()):
        if (
            name.startswith(_HUB_LOGGER + ".")
            and isinstance(logger, logging.Logger)
            and logger.level != logging.NOTSET
        ):
            out.append(logger)
    return out


@contextlib.contextmanager
def _quiet_hub() -> Iterator[None]:
    """Silence ``huggingface_hub``'s own logging (its "Retrying in 1s" and "Trying to resume
    download" lines) and progress bars while kvenv downloads; kvenv reports the failure itself.
    Downloads run in threads: the first one in saves and silences, the last one out restores.

    The client's download modules are imported first: importing its logging module (lazily,
    on the first download in a fresh process) resets the client's logger level, which would
    undo the silencing if it happened inside the window."""
    global _quiet_depth, _quiet_saved
    import huggingface_hub.file_download  # noqa: F401  (configures the client's logging)
    from huggingface_hub import constants
    from huggingface_hub.utils.tqdm import (
        are_progress_bars_disabled,
        disable_progress_bars,
        enable_progress_bars,
    )

    # HF_HUB_DISABLE_PROGRESS_BARS set either way wins over the switch (and warns if flipped).
    fixed = constants.HF_HUB_DISABLE_PROGRESS_BARS is not None
    with _quiet_lock:
        if _quiet_depth == 0:
            loggers = _hub_loggers()
            _quiet_saved = (
                {logger.name: logger.level for logger in loggers},
                fixed or are_progress_bars_disabled(),
            )
            for logger in loggers:
                logger.setLevel(logging.ERROR)
            if not _quiet_saved[1]:
                disable_progress_bars()
        _quiet_depth += 1
    try:
        yield
    finally:
        with _quiet_lock:
            _quiet_depth -= 1
            if _quiet_depth == 0:
                levels, disabled = _quiet_saved
                for name, level in levels.items():
                    logging.getLogger(name).setLevel(level)
                if not disabled:
                    enable_progress_bars()


def _explain(exc: BaseException) -> str:
    for cls in type(exc).__mro__:
        if cls.__name__ in _EXPLAIN:
            return _EXPLAIN[cls.__name__]
    lines = [line for line in str(exc).splitlines() if line.strip()]
    detail = lines[0] if lines else type(exc).__name__
    return mask(f"{type(exc).__name__}: {detail}", _tokens())[:500]


def _bar_class(
    cancel: threading.Event | None, progress: Callable[[int, int | None], None] | None
) -> type[Any]:
    """A progress-bar class for ``tqdm_class``: silent, reports to ``progress``, and stops the
    download (by raising) when ``cancel`` is set."""

    class _Bar:
        def __init__(self, *args: Any, total: int | None = None, initial: int = 0, **_: Any):
            self.n = initial
            self.total = total

        def update(self, count: int = 1) -> None:
            if cancel is not None and cancel.is_set():
                raise Cancelled("download cancelled")
            self.n += count
            if progress is not None:
                progress(self.n, self.total)

        def close(self) -> None:
            return None

        def __enter__(self) -> _Bar:
            return self

        def __exit__(
            self,
            kind: type[BaseException] | None,
            value: BaseException | None,
            traceback: TracebackType | None,
        ) -> None:
            return None

    return _Bar
