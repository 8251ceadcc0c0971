"""Finding the CUDA tools and compiling: toolchain, make, the inline (string) compiler, SASS. Imports harness.base only."""
