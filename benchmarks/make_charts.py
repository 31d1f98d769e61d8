"""Tables and a chart from every ``benchmarks/results/*.json``, for ``docs/performance.md``.

    python benchmarks/make_charts.py [--results DIR] [--doc PATH] [--svg PATH]

Each result file is walked for measurements: a mapping with ``median_ms`` or ``median_s`` (or
``ms: {median: ...}``) is one row, named by its key; rows are grouped by file and the path of
mappings above them. A file with both ``median_seconds`` and ``median_cpu_seconds`` (the apply
benchmarks) gets one group for wall time and one for CPU time. The tables (median, ratio to the
fastest row of the group, and aims where the file states them) replace the block between
``<!-- results:start -->`` and ``<!-- results:end -->`` in the doc; the chart is a hand-written
SVG (no plotting library), one panel per group, bars on a linear scale of that panel.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from html import escape
from pathlib import Path
from typing import Any

import attrs

HERE = Path(__file__).resolve().parent
START, END = "<!-- results:start -->", "<!-- results:end -->"
# Sections of a result file that a newer file measures instead: (file stem, top-level key) ->
# the newer file. They are named in the tables but not shown, so no stale figure is quoted.
SUPERSEDED = {("vllm_closure", "apply"): "apply-vllm-closure.json"}


@attrs.frozen
class Row:
    group: str
    case: str
    median_ms: float
    aim: str = ""


def _median_ms(value: dict[str, Any]) -> float | None:
    if isinstance(value.get("median_ms"), int | float):
        return float(value["median_ms"])
    if isinstance(value.get("median_s"), int | float):
        return float(value["median_s"]) * 1000
    ms = value.get("ms")
    if isinstance(ms, dict) and isinstance(ms.get("median"), int | float):
        return float(ms["median"])
    return None


def _aim(value: dict[str, Any]) -> str:
    if "aim_ms" in value:
        met = value.get("aim_met", value.get("within_aim"))
        state = "" if met is None else (" met" if met else " missed")
        return f"< {value['aim_ms']} ms{state}"
    return ""


def rows_of(data: Any, group: str, case: str = "") -> Iterator[Row]:
    if not isinstance(data, dict):
        return
    median = _median_ms(data)
    if median is not None and case:
        yield Row(group, case, median, _aim(data))
        return
    split = any(str(k).startswith("median") and "cpu" in str(k) for k in data)
    for key, value in data.items():
        if not isinstance(value, dict):
            continue
        if str(key).startswith("median"):
            unit = 1.0 if "ms" in str(key) else 1000.0
            clock = ("CPU (user + sys)" if "cpu" in str(key) else "wall") if split else ""
            yield from _median_table(value, f"{group} / {clock}" if clock else group, unit)
        elif _median_ms(value) is not None:
            yield from rows_of(value, group, str(key))
        elif key == "results":
            yield from rows_of(value, group)
        else:
            yield from rows_of(value, f"{group} / {key}")


def _median_table(table: dict[str, Any], group: str, unit: float) -> Iterator[Row]:
    """``{"median_seconds": {"cold": {"kvenv": 4.8, "uv": 10.1}, ...}}`` style results."""
    for key, value in table.items():
        if isinstance(value, int | float):
            yield Row(group, str(key), float(value) * unit)
        elif isinstance(value, dict):
            for case, number in value.items():
                if isinstance(number, int | float):
                    yield Row(f"{group} / {key}", str(case), float(number) * unit)


def _current(data: Any, stem: str) -> Any:
    """``data`` without its superseded top-level sections."""
    if not isinstance(data, dict):
        return data
    return {k: v for k, v in data.items() if (stem, k) not in SUPERSEDED}


def _rounded(value: Any) -> Any:
    """``value`` with every float rounded to 3 significant digits, for quoting."""
    if isinstance(value, float):
        return float(f"{value:.3g}")
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


def file_aims(data: Any) -> list[str]:
    """Top-level statements of aims and ratios a result file makes, as text."""
    notes: list[str] = []
    if not isinstance(data, dict):
        return notes
    keys = ("aim", "aims", "ratios", "ratio_kvenv_to_uv", "aim_met", "meets_aim", "aim_ms")
    for key in (*keys, "aim_above_bare_ms"):
        if key in data:
            notes.append(f"{key}: {json.dumps(_rounded(data[key]))}")
    for key, value in data.items():
        if isinstance(value, dict) and ("ratios" in value or "aims" in value):
            notes.extend(
                f"{key} {n}"
                for n in file_aims({k: value[k] for k in ("ratios", "aims") if k in value})
            )
    return notes


def _fmt(ms: float) -> str:
    return f"{ms / 1000:.2f} s" if ms >= 1000 else f"{ms:.1f} ms"


def tables(results: Path) -> tuple[str, list[Row]]:
    parts: list[str] = []
    every: list[Row] = []
    for path in sorted(results.glob("*.json")):
        data = _current(json.loads(path.read_text(encoding="utf-8")), path.stem)
        rows = list(rows_of(data, path.stem))
        if not rows and isinstance(data, dict) and _median_ms(data) is not None:
            rows = [Row(path.stem, str(data.get("benchmark", path.stem)), _median_ms(data) or 0.0)]
        if not rows:
            continue
        every.extend(rows)
        parts.append(f"#### `{path.name}`\n")
        taken = data.get("taken_at") if isinstance(data, dict) else None
        if taken:
            parts.append(f"Taken at {taken}.\n")
        parts.extend(
            f"Its `{key}` section is superseded by `{newer}` and not shown.\n"
            for (stem, key), newer in SUPERSEDED.items()
            if stem == path.stem
        )
        groups: dict[str, list[Row]] = {}
        for row in rows:
            groups.setdefault(row.group, []).append(row)
        for group, members in groups.items():
            fastest = min(r.median_ms for r in members) or 1.0
            if len(groups) > 1:
                parts.append(f"{group}:\n")
            parts.append("| case | median | × fastest | aim |\n|---|---:|---:|---|")
            for r in members:
                parts.append(
                    f"| {r.case} | {_fmt(r.median_ms)} | {r.median_ms / fastest:.2f} | {r.aim} |"
                )
            parts.append("")
        notes = file_aims(data)
        if notes:
            parts.append("Recorded aims and ratios: " + "; ".join(f"`{n}`" for n in notes) + "\n")
    return "\n".join(parts), every


def svg(rows: list[Row]) -> str:
    groups: dict[str, list[Row]] = {}
    for row in rows:
        groups.setdefault(row.group, []).append(row)
    width, label_w, bar_w, line_h = 980, 430, 420, 18
    body: list[str] = []
    y = 30
    for group, members in groups.items():
        top = max(r.median_ms for r in members) or 1.0
        body.append(f'<text x="10" y="{y}" font-weight="bold">{escape(group)}</text>')
        y += 8
        for r in members:
            y += line_h
            length = max(1.0, bar_w * r.median_ms / top)
            color = "#2b6cb0" if r.case.startswith(("kvenv", "take_snapshot")) else "#a0aec0"
            body.append(
                f'<text x="{label_w - 6}" y="{y}" text-anchor="end">{escape(r.case[:70])}</text>'
                f'<rect x="{label_w}" y="{y - 12}" width="{length:.1f}" height="13" '
                f'fill="{color}"/>'
                f'<text x="{label_w + length + 4:.1f}" y="{y}">{_fmt(r.median_ms)}</text>'
            )
        y += 24
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{y}" '
        'font-family="sans-serif" font-size="12">'
        f'<rect width="{width}" height="{y}" fill="white"/>'
        '<text x="10" y="16" font-size="11" fill="#4a5568">medians; each panel on its own '
        "linear scale; blue = kvenv</text>"
    )
    return head + "".join(body) + "</svg>\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, default=HERE / "results")
    parser.add_argument("--doc", type=Path, default=HERE.parent / "docs" / "performance.md")
    parser.add_argument("--svg", type=Path, default=HERE.parent / "docs" / "performance.svg")
    args = parser.parse_args(argv)
    text, rows = tables(args.results)
    args.svg.write_text(svg(rows), encoding="utf-8")
    if args.doc.is_file():
        doc = args.doc.read_text(encoding="utf-8")
        if START in doc and END in doc:
            before, rest = doc.split(START, 1)
            after = rest.split(END, 1)[1]
            doc = f"{before}{START}\n\n{text}\n{END}{after}"
            args.doc.write_text(doc, encoding="utf-8")
            print(f"updated the tables in {args.doc}")
    else:
        print(text)
    print(f"wrote {args.svg} ({len(rows)} measurements)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
