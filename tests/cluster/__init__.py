"""Tests of ``kvenv cluster`` and the runtime on a real local multi-node Ray cluster."""
