"""What a running process is, read from /proc before anything touches it: does it exist, is it
CPython and which version, and may this user trace it (a debugger and py-spy need the same right).

Every problem becomes a one-line FlameprofError that names the cause and how to fix it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from ...errors import FlameprofError
from ..process_alive import alive

SUPPORTED = ((3, 10), (3, 11), (3, 12), (3, 13))
CAP_SYS_PTRACE = 19
_EXE_VERSION = re.compile(r"python(\d)\.(\d+)")
_MAPS_VERSION = re.compile(r"libpython(\d)\.(\d+)|/python(\d)\.(\d+)/")


@dataclass(frozen=True)
class TargetProcess:
    pid: int
    uid: int
    exe: str
    version: tuple[int, int]

    @property
    def version_text(self) -> str:
        return f"{self.version[0]}.{self.version[1]}"


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return None


def _stat_fields(pid: int | str) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command name (state first, then the parent's pid),
    or None when the process is gone. The name may hold spaces and parentheses: split after the last ")"."""
    stat = _read(f"/proc/{pid}/stat")
    return None if stat is None else stat[stat.rfind(")") + 2 :].split()


def capabilities() -> int:
    """This process's effective capability mask (0 when unknown)."""
    status = _read("/proc/self/status") or ""
    m = re.search(r"^CapEff:\s*([0-9a-fA-F]+)", status, re.M)
    return int(m.group(1), 16) if m else 0


def ptrace_scope() -> int | None:
    """``kernel.yama.ptrace_scope``, or None when Yama is not in the kernel."""
    text = _read("/proc/sys/kernel/yama/ptrace_scope")
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def in_container() -> bool:
    if os.path.exists("/.dockerenv") or os.path.exists("/run/.containerenv"):
        return True
    cgroup = _read("/proc/1/cgroup") or ""
    return any(word in cgroup for word in ("docker", "kubepods", "containerd", "libpod", "lxc"))


def is_descendant(pid: int, ancestor: int) -> bool:
    """True when ``pid`` is ``ancestor``'s child, grandchild, ..."""
    seen = 0
    while pid > 1 and seen < 4096:
        fields = _stat_fields(pid)
        if fields is None:
            return False
        pid = int(fields[1])
        if pid == ancestor:
            return True
        seen += 1
    return False


def ptrace_denial(
    pid: int,
    target_uid: int,
    *,
    euid: int | None = None,
    caps: int | None = None,
    scope: int | None | str = "read",
    descendant: bool | None = None,
) -> str | None:
    """Why this user may not trace ``pid`` (and how to fix it), or None when nothing forbids it.

    The keyword arguments default to this machine's state; tests pass them to check each rule.
    """
    euid = os.geteuid() if euid is None else euid
    caps = capabilities() if caps is None else caps
    scope = ptrace_scope() if scope == "read" else scope
    privileged = bool(caps & (1 << CAP_SYS_PTRACE))
    if target_uid != euid and not privileged:
        return (
            f"permission denied: process {pid} belongs to another user (uid {target_uid}); "
            f"run flameprof attach as that user, or as root (sudo)"
        )
    if scope == 3:
        return (
            "permission denied: ptrace is disabled on this machine (kernel.yama.ptrace_scope = 3); "
            "it can only be lowered by rebooting with a different setting"
        )
    if scope == 2 and not privileged:
        return (
            "permission denied: kernel.yama.ptrace_scope = 2 lets only root attach; run flameprof attach "
            "with sudo, or lower it: sudo sysctl kernel.yama.ptrace_scope=1"
        )
    if scope == 1 and not privileged:
        descendant = is_descendant(pid, os.getpid()) if descendant is None else descendant
        if not descendant:
            return (
                "permission denied: kernel.yama.ptrace_scope = 1 lets a process attach only to its own "
                "children; run flameprof attach with sudo, or allow it: sudo sysctl "
                "kernel.yama.ptrace_scope=0"
            )
    return None


def explain_ptrace_failure(pid: int, target_uid: int) -> str:
    """The message for a debugger that was refused although ``ptrace_denial`` saw no reason."""
    reason = ptrace_denial(pid, target_uid)
    if reason:
        return reason
    if in_container() and not capabilities() & (1 << CAP_SYS_PTRACE):
        return (
            "permission denied: this container does not allow ptrace (no CAP_SYS_PTRACE); start it with "
            "--cap-add=SYS_PTRACE (docker), or add SYS_PTRACE to the pod's securityContext capabilities"
        )
    return (
        f"permission denied: the kernel refused to let this process trace {pid} (a seccomp or security "
        "module policy?); try as root, or in a container add the SYS_PTRACE capability"
    )


def python_version(exe: str, maps: str) -> tuple[int, int] | None:
    """The CPython version from the executable's name or, for embedders and plain ``python``
    binaries, from the libpython or ``lib/python3.X/`` paths mapped into the process."""
    m = _EXE_VERSION.search(os.path.basename(exe))
    if m:
        return int(m.group(1)), int(m.group(2))
    m = _MAPS_VERSION.search(maps)
    if m:
        major, minor = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
        return int(major), int(minor)
    return None


def inspect(pid: int) -> TargetProcess:
    """Check that ``pid`` is a live CPython 3.10-3.13 process this user may trace."""
    if pid <= 0:
        raise FlameprofError(f"no such process: {pid}")
    try:
        uid = os.stat(f"/proc/{pid}").st_uid
    except FileNotFoundError:
        raise FlameprofError(f"no such process: {pid}") from None
    if not alive(pid):
        raise FlameprofError(f"no such process: {pid} (it has exited)")
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
        with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as fh:
            maps = fh.read()
    except FileNotFoundError:
        raise FlameprofError(f"no such process: {pid}") from None
    except PermissionError:
        raise FlameprofError(ptrace_denial(pid, uid) or explain_ptrace_failure(pid, uid)) from None
    except OSError as exc:  # a kernel thread has no exe
        raise FlameprofError(f"process {pid} is not a Python process ({exc.strerror})") from None
    version = python_version(exe, maps)
    if version is None:
        if "python" in os.path.basename(exe).lower():
            raise FlameprofError(f"cannot tell which Python version process {pid} runs ({exe})")
        hint = [str(c) for c in _children_map().get(pid, ()) if _looks_like_python(c)]
        raise FlameprofError(
            f"process {pid} is not a Python process ({os.path.basename(exe) or exe})"
            + (f"; its child {hint[0]} is: flameprof attach {hint[0]}" if len(hint) == 1 else "")
        )
    if version not in SUPPORTED:
        raise FlameprofError(
            f"process {pid} runs Python {version[0]}.{version[1]}; flameprof attach supports "
            f"CPython 3.10 to 3.13"
        )
    denial = ptrace_denial(pid, uid)
    if denial:
        raise FlameprofError(denial)
    return TargetProcess(pid, uid, exe, version)


def sees_paths(pid: int, paths: tuple[str, ...]) -> bool:
    """Whether ``pid`` sees each of ``paths`` as the same directory as this process does (not so
    in another container, or with a private /tmp), judged through ``/proc/PID/root``."""
    try:
        return all(os.stat(f"/proc/{pid}/root{path}").st_ino == os.stat(path).st_ino for path in paths)
    except OSError:
        return False


def _looks_like_python(pid: int) -> bool:
    """Whether ``pid`` runs a python executable (a launcher such as pyenv's shim may be its parent)."""
    try:
        return python_version(os.readlink(f"/proc/{pid}/exe"), "") is not None
    except OSError:
        return False


_HELPERS = (
    "multiprocessing.resource_tracker",
    "multiprocessing.forkserver",
    "multiprocessing.semaphore_tracker",
)


def _children_map() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            fields = _stat_fields(name)
            if fields:
                children.setdefault(int(fields[1]), []).append(int(name))
    return children


def descendants(pid: int) -> list[int]:
    """The processes below ``pid`` but multiprocessing's helper processes (they only wait on a pipe;
    the workers a forkserver forks, which share its command line, are kept)."""
    children = _children_map()
    found: list[int] = []
    todo = [(child, "") for child in children.get(pid, ())]
    while todo:
        child, parent_cmdline = todo.pop(0)
        cmdline = (_read(f"/proc/{child}/cmdline") or "").replace("\0", " ")
        todo.extend((grandchild, cmdline) for grandchild in children.get(child, ()))
        if cmdline == parent_cmdline or not any(helper in cmdline for helper in _HELPERS):
            found.append(child)
    return found


def runs_parents_program(pid: int) -> bool:
    """Whether ``pid`` has its parent's command line: a fork that did not ``exec`` (as far as /proc tells)."""
    fields = _stat_fields(pid)
    if fields is None:
        return False
    ppid = fields[1]
    cmdline = _read(f"/proc/{pid}/cmdline")
    return cmdline is not None and cmdline == _read(f"/proc/{ppid}/cmdline")


def profilable(pid: int, note=lambda text: None) -> TargetProcess | None:
    """``pid`` when it is a CPython process that can be profiled; a Python process that cannot be
    is named in a ``note``, other programs and processes that ended are passed over silently."""
    try:
        return inspect(pid)
    except FlameprofError as exc:
        if "not a Python process" not in str(exc) and alive(pid):
            note(f"leaving out child process {pid}: {exc}")
    return None


def python_descendants(pid: int, note=lambda text: None) -> list[TargetProcess]:
    """The CPython processes below ``pid`` that can be profiled (DataLoader workers, ...)."""
    return [t for t in (profilable(child, note) for child in descendants(pid)) if t is not None]
