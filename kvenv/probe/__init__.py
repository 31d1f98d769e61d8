"""Probing the host (what ``kvenv fingerprint`` records and ``plan``/``doctor`` check) and the
pure policy that holds a host against a profile (:mod:`kvenv.probe.checks`,
:mod:`kvenv.probe.doctor`). The whole snapshot is taken by :mod:`kvenv.probe.host`."""
