"""tfgrpo: Training-Free GRPO, agentic in-context learning of experience libraries.

Importing this package is cheap: heavy libraries (torch, transformers, litellm, chromadb, trl) are
imported only inside the functions that need them.
"""

__version__ = "0.1.0"
