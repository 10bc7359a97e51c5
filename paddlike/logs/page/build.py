"""The page of a loaded job, and writing it so that a reloading browser never sees half
of it; apart from the command (page/__init__.py) so that follow_page.py can use both."""

from __future__ import annotations

from collections.abc import Mapping

from paddlike.logformat import write_atomically
from paddlike.logs.page.facts import job_facts
from paddlike.logs.page.render import render_page
from paddlike.logs.reader import JobView

__all__ = ["build_page", "write_atomically"]


def build_page(
    job: JobView,
    dirs: list[str],
    *,
    follow: float = 0.0,
    history: Mapping[int, list[tuple[float, int]]] | None = None,
) -> str:
    """The page of a loaded job (see facts.job_facts for `follow` and `history`)."""
    return render_page(job_facts(job, follow=follow, history=history), dirs)
