"""The bottom layer: what every other layer shares and nothing in it imports from above.

Problems and dataset loaders (`datasets`, bundled sets in `data/`), answer normalisation, majority vote,
the correctness threshold and the eval metrics (`metrics`), paired statistics (`stats`), test-set lockout
(`lockout`), typed configuration loading (`config`), safe file I/O (`atomic`, `textfile`), user-facing
errors (`errors`) and progress bars (`progress`). See docs/architecture.md.
"""
