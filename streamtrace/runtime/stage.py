"""A stage's package that is also its function: ``streamtrace.merge(...)`` calls
``streamtrace.merge.merge``, while ``streamtrace.merge`` stays the package Python's imports need
(``import streamtrace.merge.run as m``, ``from streamtrace.merge import MergeOptions``).  Written once,
here, for every stage (merge, validate, analyze, aggregate, report, diff), with the names a package imports on first
use (so that a light submodule, such as the stage's kind of output folder, loads no heavy one)."""
from __future__ import annotations

import importlib
import sys
import types


class StagePackage(types.ModuleType):
    """A package named like its stage's function; called, it runs that function (the package's
    attribute of the name of its last component: ``streamtrace.report.diff`` -> ``diff``).  Its names
    in ``LAZY`` (name -> submodule) are imported on first use."""

    def __call__(self, *args, **kwargs):
        return getattr(self, self.__name__.rpartition(".")[2])(*args, **kwargs)

    def __getattr__(self, name):
        lazy = self.__dict__.get("LAZY", {})
        if name not in lazy:
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f".{lazy[name]}", self.__name__), name)
        setattr(self, name, value)
        return value


def stage_package(name: str, lazy: dict | None = None) -> None:
    """Make the package ``name`` (already in ``sys.modules``: call it from its ``__init__`` with
    ``__name__``) a ``StagePackage``; ``lazy``: its names imported on first use (name ->
    submodule)."""
    module = sys.modules[name]
    module.__class__ = StagePackage
    if lazy:
        module.LAZY = dict(lazy)
        module.__all__ = [*getattr(module, "__all__", []), *lazy]
