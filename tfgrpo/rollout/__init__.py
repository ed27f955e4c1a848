"""Rollouts: the prompt with the library injected (`injection`), G samples per query (`sampling`), scoring
by the reward (`scoring`), and multi-turn agent trajectories over tools (`agent`, `tools/`)."""
