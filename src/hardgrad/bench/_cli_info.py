"""``hardgrad info``: the versions, devices and compiled kernels of this installation, for
bug reports and for reading benchmark numbers (the soft sorts run a C kernel compiled on
first use where a C compiler is found, and tensor operations elsewhere)."""

from __future__ import annotations

import argparse
import os
import platform
import sys


def info_lines() -> list[str]:
    """The lines ``hardgrad info`` prints (compiles the soft sorts' kernel if it was not yet
    tried: that is what the line about it reports)."""
    import torch

    from .._core import native
    from .._version import __version__
    from ..sorting import _native_pav

    cuda = torch.cuda.is_available()
    devices = ", ".join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
    built, detail = _native_pav.status()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return [
        f"hardgrad {__version__}",
        f"torch {torch.__version__}",
        f"python {platform.python_version()} on {sys.platform} {platform.machine()}",
        f"cpu: {cores} cores usable, torch threads {torch.get_num_threads()}",
        f"cuda: {devices if cuda else 'not available'}",
        f"C compiler: {native.compiler() or 'none found'}",
        f"kernel cache: {native.cache_dir()}",
        "soft sort kernel: "
        + (f"compiled ({detail})" if built else f"not available, tensor path used ({detail})"),
    ]


def info(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    for line in info_lines():
        print(line)
    return 0
