"""Reading requirements-style files (``--native-requires``, ``--require``, ``--prefer``,
``--constraint``): one PEP 508 requirement per line, ``#`` comments, ``\\`` continuations.
Options such as ``-r`` or ``--index-url`` are refused: give them as ``kvenv lock`` flags."""

from __future__ import annotations

from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement

from kvenv.errors import InputError, Problem


def parse_requirements(text: str, *, file: str) -> list[Requirement]:
    """Parse requirement lines; every bad line is reported at once."""
    out: list[Requirement] = []
    problems: list[Problem] = []
    pending = ""
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split(" #", 1)[0].strip() if not raw.lstrip().startswith("#") else ""
        if not pending:
            start = number
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = (pending + line).strip()
        pending = ""
        if not line:
            continue
        where = f"line {start}"
        if line.startswith("-"):
            problems.append(
                Problem(
                    f"options are not supported here: {line!r}",
                    file=file,
                    path=where,
                    fix="give indexes and files as `kvenv lock` flags",
                )
            )
            continue
        try:
            out.append(Requirement(line))
        except InvalidRequirement as exc:
            problems.append(
                Problem(f"not a valid requirement: {exc}", file=file, path=where, fix="use PEP 508")
            )
    if problems:
        raise InputError(f"invalid requirements file: {file}", problems=problems)
    return out


def read_requirements(path: Path) -> list[Requirement]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"requirements file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read requirements file {path}: {exc}") from None
    return parse_requirements(text, file=str(path))
