"""Test helpers in one place: local servers, scripted worlds, tiny models, one `ask()`."""
