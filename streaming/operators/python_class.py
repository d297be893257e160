"""A marker for the operators' classes that stay regular Python classes in the compiled build."""
from typing import TypeVar

__all__ = ["python_class"]

T = TypeVar("T")


def python_class(cls: type[T]) -> type[T]:
    """mypyc compiles a class that carries a decorator it does not know as a regular Python class,
    not a native one. Marked so: the classes whose instances are pickled (a queue manager's state into
    Spark's state store, a processor's settings to the workers), so that both builds pickle them alike
    and each reads the other's checkpoints; and those subclassing a built-in type mypyc cannot."""
    return cls
