"""Names for the processes and threads of a profile, so every export that shows them apart agrees."""

from __future__ import annotations

from ..model.profile import Profile


def process_label(profile: Profile, pid: int) -> str:
    """``role (pid N)`` when the profile knows the process's role, else ``pid N``."""
    for info in profile.processes:
        if info.pid == pid:
            role = info.role or "process"
            return f"{role} (pid {pid})" + (
                f" on {info.host}" if info.host and len({p.host for p in profile.processes}) > 1 else ""
            )
    return f"pid {pid}"


def thread_label(profile: Profile, index: int) -> str:
    """``<process> / <thread name> (tid N)`` for thread ``index`` of ``profile.threads``."""
    info = profile.threads[index]
    name = info.name or "thread"
    return f"{process_label(profile, info.pid)} / {name} (tid {info.tid})"
