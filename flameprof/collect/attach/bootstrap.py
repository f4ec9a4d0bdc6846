"""The code the injector queues in the target: start the agent thread (``agent.py``), and nothing else.

Paths are put into it with ``ascii()``, which yields a Python literal that evaluates to the same
string whatever it contains, so no path can inject code.
"""

from __future__ import annotations

import os
import sys

from ..engine.sampler_base import ASYNC_SIGNALS

BOOTSTRAP_ERROR = "bootstrap-error"  # the file (+ "-<pid>") where a failed bootstrap says why
# The switch interval while the agent's thread imports flameprof. Beside a busy main thread each
# file the import reads gives the GIL away and waits the interval (5 ms) to get it back: about
# 0.8 s for the agent's modules, 0.1 s at this interval; the program's own value is put back after.
IMPORT_SWITCH_INTERVAL = 0.0002


def bootstrap_source(channel: str, package_dir: str) -> bytes:
    """The code run in the target's main thread: start the agent thread, and nothing else.

    flameprof is imported from ``package_dir`` without touching the target's ``sys.path``, unless
    the target already imported flameprof (then its copy and its running Profilers are shared).
    """
    init = ascii(os.path.join(package_dir, "__init__.py"))
    error_file = ascii(os.path.join(channel, BOOTSTRAP_ERROR) + "-")
    body = (
        "import os, signal, sys\n"
        # the program's signals go to the program's threads (see sampler_base.start_without_signals)
        f"signal.pthread_sigmask(signal.SIG_BLOCK, {sorted(int(sig) for sig in ASYNC_SIGNALS)})\n"
        "interval = sys.getswitchinterval()\n"
        f"sys.setswitchinterval(min(interval, {IMPORT_SWITCH_INTERVAL}))\n"
        "quick = sys.getswitchinterval()\n"  # as the interpreter keeps it (whole microseconds)
        "try:\n"
        "    if 'flameprof' not in sys.modules:\n"
        "        import importlib.util\n"
        f"        spec = importlib.util.spec_from_file_location('flameprof', {init},"
        f" submodule_search_locations=[{ascii(package_dir)}])\n"
        "        module = importlib.util.module_from_spec(spec)\n"
        "        sys.modules['flameprof'] = module\n"
        "        spec.loader.exec_module(module)\n"
        "    from flameprof.collect.attach.agent import serve\n"
        "except BaseException as exc:\n"
        "    serve = None\n"
        "    try:\n"
        f"        with open({error_file} + str(os.getpid()), 'w') as fh:\n"
        "            fh.write(f'{type(exc).__name__}: {exc}'[:300])\n"
        "    except BaseException:\n"
        "        pass\n"
        "finally:\n"
        "    if sys.getswitchinterval() == quick:\n"  # unless the program set its own meanwhile
        "        sys.setswitchinterval(interval)\n"
        "if serve is not None:\n"
        f"    serve({ascii(channel)})\n"
    )
    code = (
        "try:\n"
        f"    __import__('threading').Thread(target=exec, args=(compile({ascii(body)}, '<flameprof attach>', "
        "'exec'),"
        " {}), name='flameprof-attach', daemon=True).start()\n"
        "except BaseException:\n"
        "    pass\n"
    )
    data = code.encode("ascii")
    assert b"\0" not in data
    return data


def package_dir() -> str:
    package_file = sys.modules["flameprof"].__file__
    assert package_file is not None  # a regular package, never a namespace one
    return os.path.dirname(os.path.abspath(package_file))
