"""``kvenv cluster``: the same verified environment on every node of an existing Ray cluster.

Ray is the engine; kvenv grows no cluster manager of its own. One Ray task pinned to each alive
node (:mod:`kvenv.cluster.nodes`) runs kvenv's own plan, apply and verify there
(:mod:`kvenv.cluster.ops`) against that node's runtime root; a bundle reaches each node through
Ray's object store in bounded, sha256-checked chunks or from a path every node can read
(:mod:`kvenv.cluster.ship`); :mod:`kvenv.cluster.report` judges the nodes' results together
(pure), and :mod:`kvenv.cluster.workers` hands the activation to the workers of a Ray job
(vLLM's Ray executor). Nothing here is imported by ``import kvenv`` or by any other command:
Ray is an optional extra (``ray``).
"""
