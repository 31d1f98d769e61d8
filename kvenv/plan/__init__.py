"""The plan: profile + lock + host + current state -> a complete, executable description of
an apply (the artifacts with their sources, the ordered steps), computed purely."""
