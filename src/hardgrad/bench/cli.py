"""The ``hardgrad`` command line (also ``python -m hardgrad``).

Subcommands:

* ``hardgrad list``: every public name of hardgrad, one line each, grouped by family
  (:mod:`hardgrad.bench._catalog`), with the ops, surrogates and estimators read from their
  registries, and the benchmark tasks.
* ``hardgrad bench [TASK ...] [--quick] [--out DIR] [--seed N] [--device D]``: run
  benchmark tasks (all of them when none is named); progress on stderr, result tables on
  stdout, ``DIR/results.json`` and ``DIR/report.md`` (and plots) with ``--out``.
* ``hardgrad plot [--out DIR]``: PNGs of every op's forward and backward per surrogate and
  of every estimator's gradient distribution on the Bernoulli toy
  (:mod:`hardgrad.bench.plots`).
* ``hardgrad audit [--all] [--ignore SPEC] SCRIPT [ARGS ...]``: run a Python script (as
  ``python SCRIPT ARGS``) under :func:`hardgrad.diagnostics.audit` and print where gradient
  flow dies in it: the problems, and with ``--all`` the notes too. On Ctrl-C the findings
  until then are printed and the exit status is 130.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._version import __version__
from ._cli_list import _list

if TYPE_CHECKING:
    import torch

__all__ = ["build_parser", "main"]


def _check_out_folder(parser: argparse.ArgumentParser, option: str, path: Path) -> None:
    """A usage error (exit 2) unless ``path`` is a folder, or one that can be created."""
    if path.exists() and not path.is_dir():
        parser.error(f"{option} {str(path)!r}: exists and is not a folder")
    ancestor = path.absolute()
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        parser.error(f"{option} {str(path)!r}: {str(ancestor)!r} is not a folder")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        parser.error(f"{option} {str(path)!r}: {str(ancestor)!r} is not writable")


#: Seeds the tasks can offset (seed + 1000 + i, ...) and still give torch.Generator.manual_seed.
_MAX_SEED = 2**62


def _check_seed(parser: argparse.ArgumentParser, seed: int) -> None:
    if not 0 <= seed <= _MAX_SEED:
        parser.error(f"--seed must be in [0, 2**62], but found {seed}")


#: The device types benchmarks run on (a tensor there must compute real values; ``meta``
#: has none), each with the check that the backend is there.
_DEVICE_TYPES = {
    "cpu": lambda torch: True,
    "cuda": lambda torch: torch.cuda.is_available(),
    "mps": lambda torch: torch.backends.mps.is_available(),
    "xpu": lambda torch: hasattr(torch, "xpu") and torch.xpu.is_available(),
}


def _check_device(parser: argparse.ArgumentParser, text: str) -> torch.device:
    """The ``--device`` as a torch device, or a usage error naming the option."""
    import torch

    try:
        device = torch.device(text)
    except (RuntimeError, ValueError) as error:
        parser.error(f"invalid --device {text!r}: {error}")
    available = _DEVICE_TYPES.get(device.type)
    if available is None:
        parser.error(
            f"--device {text!r}: benchmarks compute real values, on one of "
            f"{', '.join(_DEVICE_TYPES)}; found the device type {device.type!r}"
        )
    if not available(torch):
        parser.error(f"--device {text!r}: {device.type.upper()} is not available")
    return device


def _bench(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from . import TASK_MODULES

    bench_parser: argparse.ArgumentParser = args.bench_parser
    unknown = [t for t in args.tasks if t not in TASK_MODULES]  # no task imported for this
    if unknown:
        bench_parser.error(
            f"unknown task{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}; "
            f"available tasks: {', '.join(TASK_MODULES)}"
        )
    from . import BenchSettings, _distributed, run_tasks
    from .report import print_result

    device = _check_device(bench_parser, args.device)
    _check_seed(bench_parser, args.seed)
    if args.out is not None:
        _check_out_folder(bench_parser, "--out", args.out)
    if args.data is not None:
        from .data import check_idx_folder

        try:
            check_idx_folder(args.data)
        except (OSError, ValueError) as error:
            bench_parser.error(f"--data {str(args.data)!r}: {error}")
    try:
        _distributed.check_environment()
    except ValueError as error:
        bench_parser.error(str(error))
    if args.threads is not None and args.threads < 1:
        bench_parser.error(f"--threads must be >= 1, but found {args.threads}")
    settings_kwargs: dict[str, Any] = {
        "quick": args.quick,
        "seed": args.seed,
        "device": str(device),
        "out": args.out,
        "data": args.data,
    }
    if args.threads is not None:
        settings_kwargs["threads"] = args.threads
    settings = BenchSettings(**settings_kwargs)
    # Dedupe, keep the order given.
    names = list(dict.fromkeys(args.tasks))
    started = time.time()
    results = run_tasks(names, settings, on_result=print_result, log=sys.stderr) or []
    if _distributed.env_int("RANK", 0) != 0:  # rank 0 reports
        return 0
    from .verdict import verdict_lines, verdicts_of

    print(file=sys.stdout)
    for line in verdict_lines(verdicts_of(results), quick=settings.quick):
        print(line, file=sys.stdout)
    if settings.out is not None:
        print(wrote_line(settings.out, started), file=sys.stdout)
    sys.stdout.flush()
    return 0


def written_since(out: Path, started: float) -> list[Path]:
    """The files under ``out`` modified at or after ``started`` (``time.time()``), relative
    to ``out``: ``results.json`` and ``report.md`` first, then the rest sorted."""
    files = [
        p.relative_to(out)
        for p in out.rglob("*")
        if p.is_file() and p.stat().st_mtime >= started - _MTIME_SLACK_S
    ]
    first = [Path("results.json"), Path("report.md")]
    return [p for p in first if p in files] + sorted(p for p in files if p not in first)


#: File systems store modification times coarsely (1 s on some); a file written within
#: this of the start still counts as written by this run.
_MTIME_SLACK_S = 1.0


def wrote_line(out: Path, started: float) -> str:
    """``Wrote: 3 files in OUT/: results.json, report.md, a.png``: every file written
    under ``out`` since ``started``."""
    files = written_since(out, started)
    if not files:
        return f"Wrote: nothing in {out}/"
    names = ", ".join(p.as_posix() for p in files)
    return f"Wrote: {len(files)} file{'s' if len(files) != 1 else ''} in {out}/: {names}"


def _exit_status(code: object) -> int:
    """What Python does with ``sys.exit(code)``: an int is the status, None is 0, anything
    else is printed to stderr and gives 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _audit(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    import runpy
    import traceback

    from ..diagnostics import audit

    if args.script is None:  # optional to argparse only so that ARGS is not listed as required
        args.audit_parser.error("the following argument is required: SCRIPT")
    script = Path(args.script)
    if not script.is_file():
        args.audit_parser.error(f"no such script: {script}")
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [str(script), *args.args]
    sys.path.insert(0, str(script.resolve().parent))
    code = 0
    try:
        with audit(ignore=args.ignore) as report:
            try:
                runpy.run_path(str(script), run_name="__main__")
            except SystemExit as exit_:
                code = _exit_status(exit_.code)
            except KeyboardInterrupt:  # Ctrl-C: what was found until then, then 130
                print("interrupted: the findings until then follow", file=sys.stderr)
                code = 130
            except Exception:  # the script failed: show it, and what was found until then
                traceback.print_exc()
                code = 1
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
    # Paths as the script was named: relative to here when it was given relative.
    relative_to = None if script.is_absolute() else os.getcwd()
    print(report.format(notes=args.all, relative_to=relative_to))
    return code


def _info(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from ._cli_info import info

    return info(args, parser)


def _plot(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    plot_parser: argparse.ArgumentParser = args.plot_parser
    if args.draws < 2:
        plot_parser.error(
            f"--draws must be >= 2 (a spread needs two draws), but found {args.draws}"
        )
    _check_out_folder(plot_parser, "--out", args.out)
    _check_seed(plot_parser, args.seed)
    from .plots import plot_all  # matplotlib is imported when needed (see main)

    for path in plot_all(args.out, draws=args.draws, seed=args.seed):
        print(path)
    return 0


def _torch_version() -> str:
    """The installed torch's version, from its package metadata (torch not imported)."""
    from importlib import metadata

    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:  # e.g. a source build on the path
        import torch

        return str(torch.__version__)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``hardgrad`` command.

    Built from light metadata only (the task names of :data:`~hardgrad.bench.TASK_MODULES`,
    torch's version from its package metadata), so that ``hardgrad --help`` imports neither
    torch nor a benchmark module."""
    from . import TASK_MODULES

    parser = argparse.ArgumentParser(
        prog="hardgrad",
        description="hardgrad: gradients through hard operations. Benchmarks and listings.",
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"hardgrad {__version__} (torch {_torch_version()})",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True

    listing = commands.add_parser(
        "list",
        help="list every public name by family (ops, surrogates, estimators, ...) and the tasks",
    )
    listing.set_defaults(handler=_list)

    information = commands.add_parser(
        "info",
        help="versions, devices, and whether the soft sorts' C kernel is compiled here",
    )
    information.set_defaults(handler=_info)

    bench = commands.add_parser(
        "bench",
        help="run benchmark tasks",
        description="Run benchmark tasks: progress on stderr, tables on stdout.",
        epilog="`hardgrad list` says what each task does.",
    )
    bench.add_argument(
        "tasks",
        nargs="*",
        metavar="TASK",
        help=f"tasks to run (default: all of {', '.join(TASK_MODULES)})",
    )
    bench.add_argument("--quick", action="store_true", help="the reduced setting (minutes)")
    bench.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help="write DIR/results.json, DIR/report.md and plots",
    )
    bench.add_argument("--seed", type=int, default=0, metavar="N", help="random seed (default 0)")
    bench.add_argument(
        "--data",
        type=Path,
        default=None,
        metavar="PATH",
        help="folder of MNIST-format IDX files for the training tasks (default: "
        "scikit-learn's 8x8 digits, nothing downloaded)",
    )
    bench.add_argument(
        "--device", default="cpu", metavar="D", help="torch device, e.g. cpu or cuda (default cpu)"
    )
    bench.add_argument(
        "--threads",
        type=int,
        default=None,
        metavar="N",
        help="intra-op threads (default: the cores this process may use)",
    )
    bench.set_defaults(handler=_bench, bench_parser=bench)

    plotting = commands.add_parser(
        "plot",
        help="draw every op x surrogate and every estimator's toy gradient distribution",
        description="PNGs of every elementwise op's forward and its backward with each "
        "surrogate, and of every estimator's gradient distribution on the Bernoulli toy.",
    )
    plotting.add_argument(
        "--out", type=Path, default=Path("plots"), metavar="DIR", help="folder (default plots/)"
    )
    plotting.add_argument(
        "--draws", type=int, default=20000, metavar="N", help="toy draws per estimator"
    )
    plotting.add_argument("--seed", type=int, default=0, metavar="N", help="random seed")
    plotting.set_defaults(handler=_plot, plot_parser=plotting)

    auditing = commands.add_parser(
        "audit",
        usage="hardgrad audit [-h] SCRIPT [ARGS ...]\n"
        "       hardgrad audit [--all] [--ignore SPEC] SCRIPT [ARGS ...]",
        help="run a script under hardgrad.diagnostics.audit() and print the findings",
        description="Run SCRIPT with ARGS (like `python SCRIPT ARGS`) and report where "
        "gradient flow dies: problems (something that should be trained gets no gradient: "
        "the cause and a fix) by default, and with --all also the notes (deliberate "
        "stop-gradients, straight-through tricks, values written through .data, parameters "
        "that a problem leaves without gradient). Options go before SCRIPT; everything after "
        "it is the script's. A line ending in `# hardgrad: ignore` or "
        "`# hardgrad: ignore[KIND-OR-OP, ...]` is not reported.",
    )
    auditing.add_argument(
        "--all",
        action="store_true",
        help="also print the notes, not only the problems",
    )
    auditing.add_argument(
        "--ignore",
        action="append",
        default=[],
        metavar="SPEC",
        help="leave out findings matching SPEC: a kind (graph_cut, zero_gradient, "
        "no_gradient), an op (torch.round, round, Tensor.detach), FILE:LINE or FILE; "
        "repeat it or separate several with commas",
    )
    auditing.add_argument("script", nargs="?", metavar="SCRIPT", help="the Python script to run")
    auditing.add_argument(
        "args", nargs=argparse.REMAINDER, metavar="ARGS", help="arguments for the script"
    )
    auditing.set_defaults(handler=_audit, audit_parser=auditing)
    return parser


#: The packages of the ``[bench]`` extra (import name -> distribution name).
BENCH_EXTRA = {
    "matplotlib": "matplotlib",
    "sklearn": "scikit-learn",
    "rich": "rich",
    "numpy": "numpy",
    "scipy": "scipy",
}
INSTALL_BENCH = 'pip install "hardgrad[bench]"'


def _missing_extra(error: BaseException) -> str | None:
    """The ``[bench]`` package whose absence caused ``error`` (an ImportError, or one in
    its causes), or ``None`` when the cause is something else."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        name = getattr(current, "name", None)
        if isinstance(current, ImportError) and name:
            top = name.split(".")[0]
            if top in BENCH_EXTRA:
                return BENCH_EXTRA[top]
        current = current.__cause__ or current.__context__
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default ``sys.argv[1:]``); returns the exit code."""
    parser = build_parser()
    command = "hardgrad"
    try:
        args = parser.parse_args(argv)
        command = f"hardgrad {args.command}"
        return int(args.handler(args, parser))
    except SystemExit as exit_:  # argparse errors (2), --help and --version (0)
        code = exit_.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except ImportError as error:  # a package of the [bench] extra is not installed
        missing = _missing_extra(error)
        if missing is None:
            raise
        print(
            f"{command}: error: this needs {missing}, from the [bench] extra, which is not "
            f"installed: {INSTALL_BENCH}",
            file=sys.stderr,
        )
        return 2
    except BrokenPipeError:  # e.g. `hardgrad list | head`
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
