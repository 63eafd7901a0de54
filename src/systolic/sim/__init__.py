"""Executors of a Program: functional (values), systolic (register level), timing (cycles)."""

from .functional import FunctionalSimulator, systolic_sum, wrap48

__all__ = ["FunctionalSimulator", "systolic_sum", "wrap48"]
