"""Imports made by name: an optional extra, or an object named ``module:attribute``."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

from podracer.errors import ConfigError, ConfigValueError


def import_extra(module: str, extra: str, feature: str) -> Any:
    """``import module``, or a :class:`ConfigError` in one line that names the ``feature`` that
    needs it and the optional ``extra`` that installs it (``pip install 'podracer[extra]'``)."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ConfigError(
            f"{feature} needs the {module.split('.')[0]} package, which is not installed: "
            f"pip install 'podracer[{extra}]' (pip install -e '.[{extra}]' in a checkout)"
        ) from None


def load_attribute(path: str, what: str) -> Any:
    """``module:attribute`` imported (the current directory is searched as well as
    ``sys.path``); a missing module or attribute is a :class:`ConfigValueError` naming it."""
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        raise ConfigValueError(f"{what} {path!r} is not allowed: write module:attribute")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.append(os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        missing = error.name
        if missing is None or not (missing == module_name or module_name.startswith(missing + ".")):
            raise  # the module exists; one of its own imports is missing
        raise ConfigValueError(
            f"{what} {path!r}: no module named {module_name!r} on sys.path or in the current "
            "directory"
        ) from None
    value = module
    for part in attribute.split("."):
        if not hasattr(value, part):
            raise ConfigValueError(f"{what} {path!r}: module {module_name!r} has no {attribute!r}")
        value = getattr(value, part)
    return value
