"""The applications on top: the `dirstream` command, `run`, `verify` and the dashboard."""

__all__: list[str] = []
