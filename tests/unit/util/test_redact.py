"""The one redactor: URLs, secret values in text and bytes, secret-looking variables, scrubbing."""

from __future__ import annotations

import pytest

from kvenv._util.redact import MASK, mask, mask_bytes, redact_url, scrub, secret_values


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://files.example/a/b.whl", "https://files.example/a/b.whl"),
        ("https://user:secret@files.example/a/b.whl", "https://files.example/a/b.whl"),
        ("https://token@files.example:8443/x", "https://files.example:8443/x"),
        ("https://files.example/b.whl?X-Amz-Signature=abc#frag", "https://files.example/b.whl?…"),
        ("https://[::1]:8000/simple/", "https://[::1]:8000/simple/"),
        ("http://u:p@[::1]/simple/?k=v", "http://[::1]/simple/?…"),
        ("https://files.example:notaport/x", "<unparseable URL>"),
    ],
)
def test_redact_url(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_index_urls_lose_credentials_and_query_strings() -> None:
    """The lock engine's index pages are shown like every other URL: a token in the query
    string (signed or private index URLs) is never kept."""
    url = "https://__token__:pypi-SECRET1@index.example/simple/torch/?sig=SECRET2&exp=1"
    shown = redact_url(url)
    assert shown == "https://index.example/simple/torch/?…"
    assert "SECRET" not in shown and "__token__" not in shown and "***@" not in shown


def test_mask_replaces_every_occurrence() -> None:
    assert mask("key=abc123 and abc123 again", ["abc123"]) == "key=*** and *** again"
    assert mask("nothing here", ["abc123"]) == "nothing here"
    assert mask("empty secrets are ignored", ["", "ignored"]) == "empty secrets are ***"


def test_mask_masks_the_longer_secret_whole() -> None:
    """A secret that contains a shorter one is masked whole, whatever the order given."""
    for secrets in (["abc", "abcdef"], ["abcdef", "abc"]):
        assert mask("x abcdef y abc", secrets) == "x *** y ***"


def test_mask_bytes() -> None:
    assert mask_bytes(b"Bearer sk-123456\n", [b"sk-123456"]) == b"Bearer ***\n"
    assert mask_bytes(b"\xff\xfe sk-1 \x00", [b"sk-1", b""]) == b"\xff\xfe *** \x00"
    assert mask_bytes(b"x abcdef y abc", [b"abc", b"abcdef"]) == b"x *** y ***"
    assert MASK.encode() == b"***"


def test_secret_values_picks_secret_looking_names_longest_first() -> None:
    environ = {
        "HF_TOKEN": "hf_abcdefgh",
        "AWS_SECRET_ACCESS_KEY": "verylongsecretvalue",
        "DB_PASSWORD": "hunter2hunter2",
        "MY_API_KEY": "k" * 8,
        "SHORT_TOKEN": "abc",  # too short to mask safely
        "PATH": "/usr/bin:/bin",
        "HOME": "/root",
        "KEYBOARD": "us-layout",
    }
    assert secret_values(environ) == [
        "verylongsecretvalue",
        "hunter2hunter2",
        "hf_abcdefgh",
        "k" * 8,
    ]
    assert secret_values({}) == []


def test_scrub_masks_strings_anywhere_in_json_like_values() -> None:
    value = {
        "a": "token=SECRET99",
        "b": ["x", "SECRET99", {"c": "pre SECRET99 post"}],
        "n": 3,
        "f": 1.5,
        "none": None,
        "flag": True,
    }
    assert scrub(value, ["SECRET99"]) == {
        "a": "token=***",
        "b": ["x", "***", {"c": "pre *** post"}],
        "n": 3,
        "f": 1.5,
        "none": None,
        "flag": True,
    }
    assert scrub("plain", []) == "plain"
    assert scrub({"k": "v"}, iter(["v"])) == {"k": "***"}
