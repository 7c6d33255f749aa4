"""Progress for long CLI runs: a rich bar on a terminal, nothing when piped."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator

Report = Callable[[int, int | None], None]


@contextlib.contextmanager
def progress(description: str, *, enabled: bool | None = None) -> Iterator[Report]:
    """Yield ``report(done, total)``; draws on stderr only when it is a terminal."""
    if enabled is None:
        enabled = sys.stderr.isatty()
    if not enabled:
        yield lambda done, total: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=False,
    ) as bar:
        task = bar.add_task(description, total=None)

        def report(done: int, total: int | None) -> None:
            bar.update(task, completed=done, total=total)

        yield report
