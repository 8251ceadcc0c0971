"""Calling into C: the CUDA runtime, C declarations, loading libraries, running executables and parsing what they print. Imports harness.base and harness.compile."""
