"""Options shared by several commands, declared once (same name, same help everywhere)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import click

F = TypeVar("F", bound=Callable)


def ranks_option(help: str = "Ranks to load: all, a list (0,3) or a range (0-7).") -> Callable[[F], F]:
    return click.option("--ranks", default="all", show_default=True, help=help)


def out_option(help: str = "Output folder [default: reports/<trace dir name>/].") -> Callable[[F], F]:
    return click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path),
                        default=None, help=help)


def param_option(help: str = "Override a rule threshold, e.g. --param "
                             "collective-straggler.min_late_ms=20 (repeatable).") -> Callable[[F], F]:
    return click.option("--param", "params", multiple=True, metavar="RULE.NAME=VALUE", help=help)


def quiet_option(help: str = "No progress messages on stderr.") -> Callable[[F], F]:
    return click.option("-q", "--quiet", is_flag=True, help=help)


def force_option(help: str = "Parse the traces again even if the stored database is up to date."
                 ) -> Callable[[F], F]:
    return click.option("--force", is_flag=True, help=help)


def peak_tflops_option(help: str = "The device's peak TFLOP/s for MFU, replacing the built-in table "
                                   "(same as --param low-mfu.peak_tflops=N).") -> Callable[[F], F]:
    return click.option("--peak-tflops", "peak_tflops", type=click.FloatRange(min=0, min_open=True),
                        default=None, metavar="N", help=help)


def with_peak(params: tuple[str, ...], peak_tflops: float | None) -> list[str]:
    """--param values plus the --peak-tflops one (the low-mfu rule's parameter)."""
    return [*params, *([f"low-mfu.peak_tflops={peak_tflops}"] if peak_tflops is not None else [])]
