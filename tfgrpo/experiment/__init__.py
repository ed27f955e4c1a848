"""One command from a recipe to a paper-style table: learn runs, fine-tuned baselines, evals, comparison.

Sits at the top of the layers, beside the CLI: it orchestrates `tfgrpo.learn.loop`, `eval`, `finetune` and
`tfgrpo.eval.compare` through their library functions, on their usual run directories.
"""
