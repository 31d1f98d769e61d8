"""Several ``kvenv apply`` at once on one root (the same profile twice, another profile into its
own root sharing the cache and store, as a root belongs to one profile, and one with
``--no-wait``) while ``kvenv status`` and ``kvenv activate`` run in a loop: every apply
succeeds or waits (or, with ``--no-wait``, says clearly that another apply holds the lock),
every status/activate answers with a complete generation, and the end state verifies.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import attrs
import pytest

from tests.hardening.test_faults import Scenario, check_state, make_scenario
from tests.support.applyenv import write_project
from tests.support.hardening import kvenv_argv, kvenv_env, record_figures, run_cli
from tests.support.hubserver import HubServer, hub_server

__all__ = ["hub_server"]


@attrs.define
class Tally:
    rounds: int = 0
    applies: int = 0
    applied_or_waited: int = 0
    refused_busy: int = 0
    readers: int = 0
    corrupt: int = 0
    problems: list[str] = attrs.field(factory=list)


def _round(scenario: Scenario, cache: Path, tally: Tally, number: int) -> None:
    target = scenario.target()
    scenario.write(target)
    other = scenario.dir / "profiles" / "u.toml"
    write_project(
        scenario.dir,
        native=scenario.wheels[scenario.current],
        overlay=[scenario.helper],
        source="hf",
        name="u",
    )
    paths = ["--root", str(scenario.root), "--cache", str(cache), "--jobs", "2"]
    own = ["--root", str(scenario.root.with_name(scenario.root.name + "-u")), *paths[2:]]
    runs = [
        ["apply", scenario.profile, *paths],
        ["apply", str(other), *own],
        ["apply", scenario.profile, *paths],
        ["apply", scenario.profile, "--no-wait", *paths],
    ]
    procs = [
        subprocess.Popen(
            kvenv_argv(a),
            env=kvenv_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for a in runs
    ]
    common = [scenario.profile, "--root", str(scenario.root), "--cache", str(cache)]
    while any(p.poll() is None for p in procs):
        for command in (["status", *common, "--json"], ["activate", *common, "--shell", "json"]):
            result = run_cli(command)
            tally.readers += 1
            if result.code != 0 or "Traceback" in result.text:
                tally.corrupt += 1
                tally.problems.append(f"round {number} {command[0]}: {result.code} {result.err}")
        time.sleep(0.05)
    for args, proc in zip(runs, procs, strict=True):
        _, err = proc.communicate()
        tally.applies += 1
        if proc.returncode == 0:
            tally.applied_or_waited += 1
        elif proc.returncode == 3 and "--no-wait" in args and "another kvenv apply" in err:
            tally.refused_busy += 1
        else:
            tally.corrupt += 1
            tally.problems.append(f"round {number} {args[:2]}: exit {proc.returncode} {err[:300]}")
    problems = check_state(scenario, cache, {"1.0", "1.1"})
    final = subprocess.run(
        kvenv_argv(["apply", scenario.profile, *paths]),
        env=kvenv_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    if final.returncode != 0:
        problems.append(f"final apply exit {final.returncode}: {final.stderr[:300]}")
    problems += check_state(scenario, cache, {target})
    if problems:
        tally.corrupt += 1
        tally.problems.append(f"round {number}: {problems}")
    scenario.current = target
    tally.rounds += 1


def campaign(tmp_path: Path, hub: HubServer, rounds: int) -> Tally:
    scenario = make_scenario(tmp_path, hub, blob=1 << 20)
    cache = scenario.fresh_cache()
    tally = Tally()
    for number in range(rounds):
        _round(scenario, cache if number % 2 else scenario.fresh_cache(), tally, number)
    return tally


def test_concurrent_applies_and_readers(tmp_path: Path, hub_server: HubServer) -> None:
    tally = campaign(tmp_path, hub_server, rounds=1)
    assert tally.corrupt == 0, tally.problems
    assert tally.applied_or_waited >= 3 and tally.readers > 0


@pytest.mark.slow
def test_concurrency_exhaustive(tmp_path: Path, hub_server: HubServer) -> None:
    tally = campaign(tmp_path, hub_server, rounds=12)
    record_figures(
        "concurrency",
        {
            "rounds": tally.rounds,
            "applies": tally.applies,
            "applied_or_waited": tally.applied_or_waited,
            "refused_busy_no_wait": tally.refused_busy,
            "status_activate_reads": tally.readers,
            "corrupt_or_failed": tally.corrupt,
        },
    )
    assert tally.corrupt == 0, tally.problems
