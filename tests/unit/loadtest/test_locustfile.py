"""Locust on real clusters: every workload of loadtest/locustfile.py headless with zero failures (the
cas workload's writes by outcome, its 504s the only failures), the headless run with reports (``python -m
loadtest locust``), and the web UI (``python -m loadtest ui``) starting with the default workload
selected."""

from __future__ import annotations
