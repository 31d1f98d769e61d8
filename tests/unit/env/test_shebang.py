"""The linking step writes console scripts with the generation's shebang without importing
PyPA's installer (issue 13); what it writes is byte for byte what installer's own
``fix_shebang`` writes, for every shape of script."""

from __future__ import annotations

import io

import pytest
from installer.utils import fix_shebang

from kvenv.env.linking import with_shebang

SCRIPTS = [
    b"#!python\nimport sys\nsys.exit(0)\n",
    b"#!python",  # no newline at all
    b"#!python3.11 -E\r\nprint(1)\n",  # installer keeps only what follows the first \n
    b"#!/usr/bin/env python\nprint(1)\n",  # not the portable shebang: unchanged
    b"",
    b"\x7fELF\x02\x01\x01",  # a binary
]


@pytest.mark.parametrize("script", SCRIPTS)
@pytest.mark.parametrize("python", ["/usr/bin/python3", "/opt/my env/bin/python"])
def test_the_same_bytes_as_installer(script: bytes, python: str) -> None:
    with fix_shebang(io.BytesIO(script), python) as fixed:
        expected = fixed.read()
    assert with_shebang(script, python) == expected
