"""Imports made by name: an optional extra, or an object named ``module:attribute``."""

from __future__ import annotations

from typing import Any

from podracer.errors import ConfigError


def import_extra(module: str, extra: str, feature: str) -> Any:
    """``import module``, or a :class:`ConfigError` in one line that names the ``feature`` that
    needs it and the optional ``extra`` that installs it (``pip install 'podracer[extra]'``)."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise ConfigError(
            f"{feature} needs the {module.split('.')[0]} package, which is not installed: "
            f"pip install 'podracer[{extra}]' (pip install -e '.[{extra}]' in a checkout)"
        ) from None
