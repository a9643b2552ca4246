"""acklab: a reliability lab for webhook consumers. This package is only the CLI dispatcher."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("acklab")
except PackageNotFoundError:  # pragma: no cover - running from a bare checkout
    __version__ = "0+unknown"
