"""healer: a self-healing layer for fleets of AI coding agents and the machines they run on."""

__version__ = "0.1.0"

__all__ = ["__version__"]
