"""Suite-wide plugins: the host guard proves the host Python's protected packages are never
written during a test session (see :mod:`tests.support.hostguard`)."""

pytest_plugins = ["tests.support.hostguard"]
