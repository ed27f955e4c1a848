"""Errors of the experiences package that a user can act on (bad library file, unknown version)."""


class ExperienceError(ValueError):
    """Base class; the message says what is wrong and where."""


class LibraryFileError(ExperienceError):
    """A library file is missing, not JSON, or does not match the library schema (message names the key)."""


class UnknownVersionError(ExperienceError):
    """A history has no snapshot of the requested library version."""


class EmbeddingError(ExperienceError):
    """An embedding model or endpoint could not embed texts (unreachable, bad reply)."""


class ImportFormatError(ExperienceError):
    """A file given to `import` could not be read as experiences (message names the line)."""
