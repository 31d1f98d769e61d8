"""Leaf helpers with one job each, used by every layer above: hashing, atomic writes,
redaction, JSON/TOML I/O, packaged resources, import names, URLs."""
