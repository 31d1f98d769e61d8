"""What ``kvenv plan`` says about executable ``.pth`` lines (``import ...`` lines that ``site``
runs at every interpreter start): for each overlay wheel already unpacked in the store, the
lines it ships and whether the profile allows them (``[[overlay.allow_pth]]``); for wheels not
unpacked yet, that they are checked at install (:func:`kvenv.env.store.check_pth`)."""

from __future__ import annotations

from pathlib import Path

import attrs

from kvenv._util.importnames import fold
from kvenv.env.store import lookup
from kvenv.model.profile import Waiver
from kvenv.plan.make import Plan, PlanFinding

CHECK = "overlay-pth"


def pth_findings(plan: Plan, store: Path, allowed: list[Waiver]) -> list[PlanFinding]:
    """One finding per overlay wheel in the store that ships executable ``.pth`` lines, and
    one for the overlay wheels whose files are not known yet."""
    reasons = {fold(w.name): w.reason for w in allowed}
    out: list[PlanFinding] = []
    unknown: list[str] = []
    for artifact in plan.artifacts:
        if artifact.role != "overlay":
            continue
        entry = lookup(store, artifact.sha256)
        if entry is None:
            unknown.append(artifact.name)
            continue
        hooks = entry.dist.executable_pth
        if not hooks:
            continue
        lines = "; ".join(f"{h.file}: {h.line!r}" for h in hooks[:3])
        lines += f" (+{len(hooks) - 3} more)" if len(hooks) > 3 else ""
        what = f"{artifact.name} {artifact.version} ships a .pth line Python runs at every start"
        reason = reasons.get(fold(artifact.name))
        if reason is not None:
            out.append(PlanFinding(CHECK, "pass", f"{what}, allowed ({reason}): {lines}"))
        else:
            out.append(
                PlanFinding(
                    CHECK,
                    "error",
                    f"{what}: {lines}",
                    fix=f'allow it: [[overlay.allow_pth]] name = "{artifact.name}" with a '
                    "reason; or remove the wheel from the overlay",
                )
            )
    if unknown:
        shown = ", ".join(unknown[:5]) + (
            f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
        )
        out.append(
            PlanFinding(
                CHECK,
                "untested",
                f".pth files of {len(unknown)} overlay wheel(s) not unpacked yet ({shown}) are "
                "checked at install; executable lines need [[overlay.allow_pth]]",
            )
        )
    return out


def with_pth_findings(plan: Plan, store: Path, allowed: list[Waiver]) -> Plan:
    """``plan`` with :func:`pth_findings` added (an error makes it incompatible)."""
    found = pth_findings(plan, store, allowed)
    if not found:
        return plan
    findings = [*plan.findings, *found]
    compatible = plan.compatible and not any(f.status == "error" for f in found)
    return attrs.evolve(plan, findings=findings, compatible=compatible)
