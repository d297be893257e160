"""Prometheus configuration and alert rules for the job (data files, shipped in the wheel)."""

__all__: list[str] = []
