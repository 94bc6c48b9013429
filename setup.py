"""The one compiled part of the broker: the record walk of the produce path (everything else is in
pyproject.toml). `records.py` falls back to a Python walk, slower per record, if the module is missing."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("broker_runtime.protocol._recordscan", ["broker_runtime/protocol/_recordscan.c"])])
