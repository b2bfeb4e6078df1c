"""OpenBLAS at its best for the PyTorch yardstick, whatever the host.

Debian 12's OpenBLAS (0.3.21, built for every x86-64 kernel) chooses its kernel from the CPU's
family and model numbers. On a CPU it does not know (a newer Xeon, or a virtual machine that
reports a generic "Intel(R) Xeon(R) Processor") it falls back to "Prescott", its SSE3 kernels,
however wide the vector units are: a float32 GEMM then runs several times slower than on the
AVX-512 kernel of the same machine. A host may also set OPENBLAS_CORETYPE to a lesser kernel in
its environment (Haswell's AVX2 on an AVX-512 machine). Either way PyTorch is not at its best and a
ratio against it says nothing.

So the benchmark scripts run PyTorch with OPENBLAS_CORETYPE set from the instruction sets the CPU
reports in /proc/cpuinfo: SkylakeX where AVX-512 F/CD/BW/DQ/VL are there (OpenBLAS's float32
kernels for Cooper Lake and Sapphire Rapids are SkylakeX's), Haswell where AVX2 and FMA are, and
OpenBLAS's own choice (the variable removed) otherwise. OpenBLAS reads the variable once, when it
loads, so a script fixes its environment and re-executes itself before importing torch
(`reexec_with_best_openblas`), and a parent gives its PyTorch children `best_env(...)`. The kernel
that ran is recorded by threadpoolctl in every measurement's JSON.
"""

import os
import sys

VARIABLE = "OPENBLAS_CORETYPE"


def cpu_flags() -> set:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def best_coretype(flags=None):
    """The OpenBLAS kernel for float32 GEMM on this CPU, or None to leave the choice to OpenBLAS."""
    flags = cpu_flags() if flags is None else flags
    if {"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"} <= flags:
        return "SkylakeX"
    if {"avx2", "fma"} <= flags:
        return "Haswell"
    return None


def best_env(environ=None) -> dict:
    """A copy of `environ` (default os.environ) with OPENBLAS_CORETYPE set to best_coretype()
    (or removed when there is none to choose)."""
    env = dict(os.environ if environ is None else environ)
    want = best_coretype()
    if want:
        env[VARIABLE] = want
    else:
        env.pop(VARIABLE, None)
    return env


def reexec_with_best_openblas(extra=None):
    """Re-executes this script with best_env() (plus `extra` variables) unless it already has it.
    Call before anything loads OpenBLAS (before `import torch` or numpy)."""
    env = best_env()
    env.update(extra or {})
    if any(os.environ.get(k) != env.get(k) for k in {VARIABLE} | set(extra or {})):
        os.execve(sys.executable, [sys.executable] + sys.argv, env)
