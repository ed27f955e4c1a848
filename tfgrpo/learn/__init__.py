"""Training-Free GRPO's learn loop, along the data path: `loop` (epochs, steps) → rollouts (`tfgrpo.rollout.sampling`)
→ rewards → `stages` (summarise, group advantage, consolidate) → operations applied to the library; with
its `config`, `metrics`, run directory (`rundir`), validation `selection` and leakage `guards`."""
