"""`tfgrpo serve`: a learned library behind an OpenAI-compatible endpoint, with an A/B arm and traces.

FastAPI/uvicorn and SQLAlchemy are imported by the modules that need them, never by `tfgrpo` itself.
"""
