"""Kept for tools that still call setup.py; the metadata lives in setup.cfg."""

from setuptools import setup

setup()
