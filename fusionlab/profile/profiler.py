"""One torch.profiler session, quietly: Kineto writes `USDT: ... profiler_start` / `profiler_stop` lines straight to
the process's stderr (file descriptor 2, below Python) when a session starts and stops, which a notebook shows
under the cell as errors. The start and the stop are run with that descriptor pointed at /dev/null; the profiled
code itself runs with stderr as it was.

    >>> with quiet_profile([ProfilerActivity.CPU]) as profiler:
    ...     step()
    >>> profiler.events()
"""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

__all__ = ["quiet_profile"]


@contextlib.contextmanager
def _stderr_muted() -> Iterator[None]:
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no file descriptor 2 to mute: leave it be
        yield
        return
    try:
        with open(os.devnull, "w") as sink:
            os.dup2(sink.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


@contextlib.contextmanager
def quiet_profile(activities: Sequence[Any]) -> Iterator[Any]:
    """`torch.profiler.profile(activities=...)`, started and stopped without Kineto's lines on stderr."""
    from torch.profiler import profile

    session = profile(activities=list(activities))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*Profiler clears events")
        with _stderr_muted():
            session.__enter__()
        try:
            yield session
        finally:
            with _stderr_muted():
                session.__exit__(None, None, None)
