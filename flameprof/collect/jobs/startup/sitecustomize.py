"""Starts flameprof in a Python process whose parent ``flameprof run`` is profiling the whole job.

Python imports ``sitecustomize`` at startup from the first directory on ``sys.path`` that has one;
``flameprof run`` puts this file's directory first on children's PYTHONPATH. It starts the sampler
(``flameprof.collect.jobs.child``), leaves ``sys.path`` as it would have been, then runs the
``sitecustomize`` that this one hides, if any, so a user's or the distribution's still runs.
Nothing here may stop the process from starting: every failure is swallowed.
"""

import os
import sys


def _flameprof_start(here: str) -> None:
    if not os.environ.get("FLAMEPROF_CHILD_DIR"):
        return
    root = os.path.dirname(
        os.path.dirname(os.path.dirname(os.path.dirname(here)))
    )  # above flameprof/collect/jobs/startup
    sys.path.insert(0, root)  # import the flameprof that set this up, whatever this interpreter has
    try:
        from flameprof.collect.jobs.child import start_from_environment

        start_from_environment()
    except Exception:
        pass
    finally:
        sys.path.remove(root)


def _run_hidden_sitecustomize(here: str) -> None:
    import importlib.machinery
    import importlib.util

    path = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # as site.py reports a failing sitecustomize
        print(
            f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{type(exc).__name__}: {exc}",
            file=sys.stderr,
        )


def _bootstrap() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    try:
        _flameprof_start(here)
    except Exception:
        pass
    _run_hidden_sitecustomize(here)


_bootstrap()
del _bootstrap, _flameprof_start, _run_hidden_sitecustomize
