"""Sans-IO protocol state machines run by the job's stateful operators (state + event -> state + outputs)."""

__all__: list[str] = []
