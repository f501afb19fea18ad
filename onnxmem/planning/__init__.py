"""The composition: view -> order -> liveness -> problem -> solve -> plan, for graphs, bodies, ranges and programs."""
