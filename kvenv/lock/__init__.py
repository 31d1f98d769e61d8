"""The lock engine: cross-target, host-aware resolution to a hashed PEP 751 pylock.

Reading API for other commands (plan, apply): :func:`kvenv.lock.pylock.read_lock` returns a
:class:`~kvenv.lock.pylock.LockFile` (the validated :class:`packaging.pylock.Pylock`, the
parsed ``[tool.kvenv]`` table, and each package's ``[packages.tool.kvenv]``); malformed input
raises :class:`kvenv.errors.LockError` whose problems carry ``$.packages[3].wheels[0]``-style
paths. :mod:`kvenv.lock.input` reads the profile's lock for plan and apply. The resolver itself
(resolvelib, unearth) is imported only by :mod:`kvenv.lock.engine`. Importing this package
imports nothing else (start-up time).
"""
