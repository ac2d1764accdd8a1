"""What decides a fresh run's outputs on this machine, recorded in config.json (``machine``).

An API model's answers depend on its provider; an embedded model's on the llama.cpp build that
runs it: the same prompt at temperature 0 gives other greedy outputs under kernels for other
instruction sets (measured: `bench/llama_kernels.py`), while the thread count does not change
them. The install pins llama.cpp's instruction set (README, `.ci/llama-build-flags`), so every
x86-64 machine with AVX2 runs the same kernels; this record says which build and CPU a run had,
so two runs that differ can be told apart. A cached rerun is identical anywhere: the answers
come from the cache.
"""

from __future__ import annotations

import platform
import sys
from pathlib import Path
from typing import Any

# the CPU features that choose llama.cpp's kernels when it is built for the host
KERNEL_FLAGS = (
    "sse3", "ssse3", "avx", "avx2", "fma", "f16c", "bmi2", "avx_vnni", "avx512f", "avx512bw",
    "avx512vl", "avx512_vnni", "avx512_bf16", "avx512vbmi", "amx_tile", "amx_int8", "amx_bf16",
    "asimd", "sve", "sve2", "i8mm",
)  # fmt: skip


def cpu() -> dict[str, Any]:
    """The CPU's name and its kernel-relevant features, as far as the OS tells."""
    name, flags = platform.processor() or platform.machine(), set()
    info = Path("/proc/cpuinfo")
    if info.is_file():
        for line in info.read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key == "model name" and value.strip():
                name = value.strip()
            elif key in ("flags", "Features") and not flags:
                flags = set(value.split())
    return {"model": name, "arch": platform.machine(),
            "features": [f for f in KERNEL_FLAGS if f in flags]}  # fmt: skip


def llama_cpp_build() -> dict[str, Any]:
    """llama-cpp-python's version and llama.cpp's system info (the kernels it was built with)."""
    import llama_cpp

    return {
        "llama_cpp_python": llama_cpp.__version__,
        "system_info": llama_cpp.llama_print_system_info().decode().strip(" |"),
    }


def describe(uses_embedded_model: bool) -> dict[str, Any]:
    """The record for config.json: the CPU always, llama.cpp's build when it runs a model."""
    out: dict[str, Any] = {"cpu": cpu(), "python": sys.version.split()[0]}
    if uses_embedded_model:
        out["llama_cpp"] = llama_cpp_build()
    return out
