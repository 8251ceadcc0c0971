"""Profilers and sanitizers: nsys, ncu, compute-sanitizer. Imports the layers below; never a program module."""
