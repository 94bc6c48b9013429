"""Version-agnostic construction of kio messages.

Handlers describe a response once, with the fields of the newest version; `make` keeps only the fields the
requested version has, so one code path serves every advertised version.
"""

from __future__ import annotations

import dataclasses
import importlib
from functools import cache
from types import ModuleType
from typing import Any

from kio.index import load_response_schema


@cache
def response_module(api_key: int, api_version: int) -> ModuleType:
    return importlib.import_module(load_response_schema(api_key, api_version).__module__)


@cache
def field_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls))


def make(cls: type, **values: Any) -> Any:
    names = field_names(cls)
    return cls(**{k: v for k, v in values.items() if k in names})
