"""Runtime: compile kernels (Triton JIT on CUDA, Triton's interpreter on CPU) and run the program."""
