"""``flameprof attach``'s inject backend: run flameprof's own sampler inside a live CPython process.

How (the CLI side; ``agent.py`` is the side inside the target):

1. A private channel (``channel.py``): a fresh 0700 directory holding a unix socket the CLI
   listens on.
2. The injector (``ptrace_injector.py``) borrows the target's main thread for well under a
   millisecond: it maps one anonymous page, writes the bootstrap (``bootstrap.py``) into it and
   queues ``PyRun_SimpleString(page)`` with ``Py_AddPendingCall``, then gives the thread back with
   its whole register state and its interrupted system call as they were. The interpreter runs
   pending calls in the main thread between bytecodes, so the bootstrap starts at a safe point; it
   only starts the agent thread, catching everything, and binds no name in ``__main__``. The page
   (4 KiB) stays mapped.
3. The agent connects, samples, writes its part file (``jobs/parts.py``, mode 0600) into the
   channel every few seconds and a last time on "stop" (or when the CLI disappears, or at the
   target's exit).
4. The CLI loads each part with ``storage.loads`` (zip of JSON and ``.npy`` without pickle) from a
   regular file opened without following symlinks, drops the agent's own thread and merges the
   processes by role; nothing a target writes is ever executed.
"""

from __future__ import annotations

import json
import os
import select
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from ...errors import FlameprofError, InjectUnavailable
from ...model import storage
from ...model.merge import merge_profiles
from ...model.profile import Profile
from ...model.trace import concat
from ..engine.trace_window import read_exported
from ..jobs.parts import part_files, wait_for_parts
from ..process_alive import alive
from .agent import DETACH_THREAD, FLUSH_INTERVAL, mark_detached
from .bootstrap import BOOTSTRAP_ERROR, bootstrap_source, package_dir
from .channel import Channel, Remote
from .ptrace_injector import inject, try_inject, try_inject_late, unavailable
from .target import TargetProcess, sees_paths
from .watch import WATCH_INTERVAL, ChildWatcher, part_pid

CONNECT_TIMEOUT = 10.0  # the main thread must reach a safe point (run a bytecode) within this
START_TIMEOUT = 60.0  # the agent imports flameprof in the target
SAVE_TIMEOUT = 60.0
FOLLOWED_GRACE = 3.0  # seconds for followed children to write their final part after the detach
LIVENESS_INTERVAL = 0.5  # seconds between checks that a process whose agent is silent still runs
LIVE_INTERVAL = 1.0  # seconds between the live view's looks at the parts (the agents flush every second)


def record(
    target: TargetProcess,
    duration: float | None,
    rate: float,
    note: Callable[[str], None] = lambda text: None,
    children: Sequence[TargetProcess] = (),
    backward_layers: bool = False,
    follow_forks: bool = False,
    trace_steps: int | None = None,
    live: Callable[[Callable[[], Profile | None]], bool] | None = None,
) -> Profile:
    """Profile ``target`` (and ``children``) for ``duration`` seconds (None: until Ctrl-C) with the
    injected agent; several processes come back as one merged profile. With ``follow_forks`` the
    children that the profiled processes fork meanwhile are profiled too, and other Python
    processes that appear below ``target`` are injected as they appear. With ``trace_steps`` K, each
    profiled process also traces its next K whole steps (collect/engine/trace_window.py). ``live`` is
    called about every second with a function returning the profile so far (the agents flush every
    second); it returns True to end the attach (``flameprof top``).

    Raises InjectUnavailable when injection cannot work for ``target`` (the caller may use py-spy
    instead), FlameprofError for everything else; a child that cannot be profiled is left out.
    """
    reason = unavailable()
    if reason:
        raise InjectUnavailable(reason)
    with Channel([target, *children]) as channel:
        paths = (channel.path, package_dir())
        elsewhere = (
            "it sees other files (a container, or a private /tmp), without flameprof or the channel "
            f"directory {channel.path}"
        )
        if not sees_paths(target.pid, paths):
            raise InjectUnavailable(elsewhere)
        known = {target.pid, *(c.pid for c in children)}
        for child in [c for c in children if not sees_paths(c.pid, paths) and alive(c.pid)]:
            note(f"leaving out child process {child.pid}: {elsewhere}")
        children = [c for c in children if sees_paths(c.pid, paths)]
        payload = bootstrap_source(channel.path, package_dir())
        inject(target, payload)
        injected = [target]
        with ThreadPoolExecutor(max_workers=4) as pool:  # an injection is mostly its process's start
            failures = pool.map(lambda child: try_inject(child, payload), children)
        for child, failure in zip(children, failures):
            if not failure:
                injected.append(child)
            elif alive(child.pid):  # one that ended meanwhile is simply not there
                note(f"leaving out child process {child.pid}: {failure}")
        config = {
            "rate": rate,
            "backward_layers": backward_layers,
            "follow_forks": follow_forks,
            "trace_steps": trace_steps,
        }
        remotes = _start(channel, injected, config)
        by_pid = {t.pid: t for t in injected}

        def admit(child: TargetProcess) -> None:
            channel.pids.add(child.pid)
            by_pid[child.pid] = child

        watcher = (
            ChildWatcher(
                target.pid,
                known,
                channel.path,
                paths,
                lambda child: try_inject_late(child, payload),
                admit,
                note,
            )
            if follow_forks
            else None
        )
        try:
            others = f" and {len(injected) - 1} child process(es)" if len(injected) > 1 else ""
            note(
                f"profiling process {target.pid}{others} (Python {target.version_text}) "
                + (f"for {duration:g} s" if duration else "until Ctrl-C")
            )
            try:
                _wait(
                    channel, remotes, by_pid, config, duration, watcher, _live_tick(live, channel, target.pid)
                )
            finally:
                if watcher is not None:
                    watcher.close()
            _stop(remotes)
            # a child injected late is named only while it runs (short-lived ones come and go)
            late = [by_pid[pid] for pid in sorted(watcher.queued)] if watcher is not None else []
            for child in injected[1:] + [c for c in late if alive(c.pid)]:
                if child.pid not in channel.accepted:
                    note(
                        f"leaving out child process {child.pid}: "
                        f"{_not_started(channel, child, 'during the attach')}"
                    )
            profiles = [p for p in (_collect(channel, r, note) for r in remotes) if p is not None]
            if follow_forks:
                profiles += _collect_followed(channel, {r.target.pid for r in remotes}, note)
        finally:
            for remote in remotes:
                remote.conn.close()
        if len(profiles) == 1:
            merged = profiles[0]
        else:
            merged = merge_profiles(profiles, main_pid=target.pid)
            merged.meta.update(collector="attach", backend="inject")
        if trace_steps:
            merged.trace = concat(
                [merged.trace, read_exported(channel.path, float(merged.meta["start_time"]))]
            )
    return merged


def _accept(
    channel: Channel, by_pid: dict[int, TargetProcess], main_pid: int, config: dict, timeout: float
) -> Remote | None:
    """The next agent to connect, configured; None after ``timeout`` seconds."""
    got = channel.accept(timeout)
    if got is None:
        return None
    pid, conn = got
    conn.sendall((json.dumps(dict(config, main=pid == main_pid)) + "\n").encode())
    return Remote(by_pid[pid], conn, pid == main_pid)


def _start(channel: Channel, injected: list[TargetProcess], config: dict) -> list[Remote]:
    """Wait for the main process's agent to sample and, within the same CONNECT_TIMEOUT, for the
    injected children's agents to connect (one still missing then may join during the attach).
    The main process's remote comes first."""
    main = injected[0]
    by_pid = {t.pid: t for t in injected}
    remotes: list[Remote] = []
    deadline = time.monotonic() + CONNECT_TIMEOUT
    while not any(r.main for r in remotes):
        remote = _accept(channel, by_pid, main.pid, config, min(0.2, max(0.0, deadline - time.monotonic())))
        if remote is not None:
            remotes.append(remote)
            continue
        failed = channel.read_private(f"{BOOTSTRAP_ERROR}-{main.pid}", 1) or not alive(main.pid)
        if failed or time.monotonic() >= deadline:  # the bootstrap's error or the exit need no more wait
            for other in remotes:
                other.conn.close()  # their agents stop at the end of file
            raise _not_started(channel, main, f"for {CONNECT_TIMEOUT:.0f} s")
    # The children's agents import flameprof beside a busy main thread and may connect late: the
    # duration starts once every injected process that still runs Python has connected.
    pending = set(by_pid) - {r.target.pid for r in remotes}
    while pending and time.monotonic() < deadline:
        remote = _accept(channel, by_pid, main.pid, config, min(0.2, max(0.0, deadline - time.monotonic())))
        if remote is not None:
            remotes.append(remote)
        pending = {
            pid
            for pid in pending - {r.target.pid for r in remotes}
            if alive(pid) and not channel.read_private(f"{BOOTSTRAP_ERROR}-{pid}", 1)
        }
    remotes.sort(key=lambda r: not r.main)
    event = remotes[0].events.next(START_TIMEOUT) or {}
    if event.get("event") == "error":
        raise InjectUnavailable(str(event.get("message", "the agent failed"))[:300])
    if event.get("event") != "started":
        if not alive(main.pid):
            raise FlameprofError(f"process {main.pid} exited before profiling started")
        raise FlameprofError(f"the agent in process {main.pid} did not start")
    return remotes


def _not_started(channel: Channel, target: TargetProcess, waited: str) -> FlameprofError:
    """Why the agent of ``target`` never connected, after waiting ``waited``."""
    failure = channel.read_private(f"{BOOTSTRAP_ERROR}-{target.pid}", 300)
    if failure:
        return InjectUnavailable(
            "the agent failed to load in the process: " + failure.decode("utf-8", "replace")
        )
    if not alive(target.pid):
        return FlameprofError(f"process {target.pid} exited before profiling started")
    return InjectUnavailable(
        f"the process's main thread ran no Python code {waited} (blocked in a long call), "
        "so the agent could not start"
    )


def _wait(
    channel: Channel,
    remotes: list[Remote],
    by_pid: dict[int, TargetProcess],
    config: dict,
    duration: float | None,
    watcher: ChildWatcher | None,
    tick: Callable[[], bool] | None = None,
) -> None:
    """Wait out the duration, or Ctrl-C, or the main process's end (its agent then finishes first),
    or ``tick`` returning True (it is called every LIVE_INTERVAL), accepting the agents of children
    that connect meanwhile, and letting ``watcher`` look for new ones."""
    deadline = None if duration is None else time.monotonic() + duration
    main = remotes[0]
    next_tick = time.monotonic() + LIVE_INTERVAL
    try:
        while main.result is None and (deadline is None or time.monotonic() < deadline):
            if tick is not None and time.monotonic() >= next_tick:
                next_tick = time.monotonic() + LIVE_INTERVAL
                if tick():
                    break
            if watcher is not None:
                watcher.poll()
            live = [r for r in remotes if r.result is None]
            waiting = [channel.server] if len(channel.accepted) < len(by_pid) else []
            left = (
                LIVENESS_INTERVAL
                if deadline is None
                else max(0.0, min(LIVENESS_INTERVAL, deadline - time.monotonic()))
            )
            if watcher is not None:
                left = min(left, WATCH_INTERVAL)
            if tick is not None:
                left = min(left, max(0.0, next_tick - time.monotonic()))
            ready = select.select([r.conn for r in live] + waiting, [], [], left)[0]
            if channel.server in ready:
                remote = _accept(channel, by_pid, main.target.pid, config, 0)
                if remote is not None:
                    remotes.append(remote)
            for remote in live:
                if remote.conn in ready:
                    remote.pump(0)
            main.settle_if_gone()
    except KeyboardInterrupt:
        pass


def _stop(remotes: list[Remote]) -> None:
    """Tell every agent still sampling to stop, and wait for each to save."""
    for remote in remotes:
        if remote.result is None:
            try:
                remote.conn.sendall(b"stop\n")
            except OSError:
                pass
    deadline = time.monotonic() + SAVE_TIMEOUT
    for remote in remotes:
        while remote.result is None and time.monotonic() < deadline:
            remote.pump(max(0.0, min(LIVENESS_INTERVAL, deadline - time.monotonic())))
            remote.settle_if_gone()


def _collect(channel: Channel, remote: Remote, note: Callable[[str], None]) -> Profile | None:
    """The profile one agent handed back (or, if its process was killed, what it wrote last)."""
    pid = remote.target.pid
    result = remote.result or {}
    if result.get("reason") == "followed":  # its own part is collected with the followed forks
        return None
    if result.get("event") == "saved":
        if result.get("reason") == "exit" and remote.main:  # children come and go
            note(f"process {pid} exited during the attach; saved the samples taken so far")
        return _load(channel, remote.target)
    if result.get("event") == "error":
        message = str(result.get("message", "the agent failed"))[:300]
    elif not _ended(pid):
        message = f"the agent in process {pid} did not hand back a profile"
    else:
        try:
            profile = _load(channel, remote.target, f"process {pid} exited before its profile could be saved")
        except FlameprofError as exc:
            message = str(exc)
        else:
            note(
                f"process {pid} ended abruptly during the attach; saved the samples up to its last "
                f"flush (every {FLUSH_INTERVAL:g} s)"
            )
            return profile
    remote.fail(message, note)
    return None


def _ended(pid: int, wait: float = 1.0) -> bool:
    """Whether ``pid`` ended, allowing for a killed process whose sockets are closed before it is a zombie."""
    deadline = time.monotonic() + wait
    while alive(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    return True


def _collect_followed(channel: Channel, injected: set[int], note: Callable[[str], None]) -> list[Profile]:
    """The profiles of the children forked during the attach: each wrote its own part (see
    ``agent.py``); a child still profiling after the grace keeps what it had written."""
    mark_detached(channel.path)  # the agent did, unless its process ended abruptly
    partial = set(wait_for_parts(channel.path, FOLLOWED_GRACE))
    profiles = []
    for path in part_files(channel.path):
        pid = part_pid(path)
        if pid is None or pid in injected:
            continue
        data = channel.read_private(os.path.basename(path), 1 << 31)
        try:
            profile = storage.loads(data or b"", f"profile from child process {pid}")
        except FlameprofError as exc:
            note(f"leaving out child process {pid}: {exc}")
            continue
        if path in partial:
            note(
                f"child process {pid} did not finish its profile; kept the {profile.num_samples} samples it "
                "had written"
            )
        detach = [t.tid for t in profile.threads if t.pid == pid and t.name == DETACH_THREAD]
        if detach:  # sampled once, as stopping the child's sampler takes a last sample
            profile = profile.without_thread(pid, detach[0])
        if profile.num_samples:
            profile.meta.update(collector="attach", backend="inject")
            profiles.append(profile)
    return profiles


def _live_tick(
    live: Callable[[Callable[[], Profile | None]], bool] | None, channel: Channel, main_pid: int
) -> Callable[[], bool] | None:
    if live is None:
        return None
    return lambda: live(lambda: _so_far(channel, main_pid))


def _so_far(channel: Channel, main_pid: int) -> Profile | None:
    """Every agent's part as it is now, merged (None before the first flush, or when a part cannot be
    read at this moment)."""
    profiles = []
    for path in part_files(channel.path):
        data = channel.read_private(os.path.basename(path), 1 << 31)
        if not data:
            continue
        try:
            profile = storage.loads(data, path)
        except FlameprofError:
            return None
        agent_tid = profile.meta.pop("agent_tid", None)
        pid = profile.processes[0].pid if profile.processes else main_pid
        if isinstance(agent_tid, int):
            profile = profile.without_thread(pid, agent_tid)
        if profile.num_samples:
            profiles.append(profile)
    if not profiles:
        return None
    return profiles[0] if len(profiles) == 1 else merge_profiles(profiles, main_pid=main_pid)


def _load(channel: Channel, target: TargetProcess, missing: str = "") -> Profile:
    """The part the agent wrote, without the agent's own thread (idle in a read)."""
    name = f"-{target.pid}.flameprof"
    paths = [p for p in part_files(channel.path) if p.endswith(name)]
    data = channel.read_private(os.path.basename(paths[0]), 1 << 31) if paths else None
    if not data:
        raise FlameprofError(missing or f"the agent in process {target.pid} wrote no profile")
    profile = storage.loads(data, f"profile from process {target.pid}")
    agent_tid = profile.meta.pop("agent_tid", None)
    if isinstance(agent_tid, int):
        profile = profile.without_thread(target.pid, agent_tid)
    profile.meta.update(collector="attach", backend="inject")
    return profile
