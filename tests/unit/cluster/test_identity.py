"""Two nodes' generations are the same when their content is, wherever and whenever they were
applied."""

from __future__ import annotations

from pathlib import Path

import attrs

from kvenv.cluster.identity import generation_digest
from kvenv.env.root import current_manifest
from tests.support.applyenv import apply, fake_host_site, host_snapshot, local_project, locations


def test_the_digest_ignores_where_and_when_but_not_what(tmp_path: Path) -> None:
    project = local_project(tmp_path / "proj")
    host = host_snapshot(fake_host_site(tmp_path))
    digests = []
    manifests = []
    for node in ("a", "b"):
        where = locations(tmp_path / node)
        apply(project.loaded(), project.lock(), host, where)
        manifest = current_manifest(where.root)
        assert manifest is not None
        manifests.append(manifest)
        digests.append(generation_digest(manifest))
    assert manifests[0].root != manifests[1].root
    assert manifests[0].generation != manifests[1].generation
    assert digests[0] == digests[1]
    changed = attrs.evolve(
        manifests[0],
        distributions=[
            attrs.evolve(d, version="9.9") if d.name == "helper" else d
            for d in manifests[0].distributions
        ],
    )
    assert generation_digest(changed) != digests[0]
