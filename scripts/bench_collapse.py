"""Benchmark: ``flameprof collapse perf`` against FlameGraph's ``stackcollapse-perf.pl`` on the same
``perf script`` text, side by side (interleaved runs, median), checking the outputs are identical.

The input is generated: a deterministic program-like call tree sampled with a skewed distribution,
in the exact ``perf script`` layout (event line with period, indented ``addr sym+off (dso)`` lines,
kernel frames, inlined frames, unknown symbols, C++ signatures, Python perf-trampoline frames), with
leaf instruction offsets that vary per sample as real profiles' do.

    python scripts/bench_collapse.py --perl-script /path/to/stackcollapse-perf.pl [--size-mb 200]

The Perl script path can also come from FLAMEPROF_STACKCOLLAPSE_PL; without it only flameprof is timed.
Both wall-clock and CPU time are reported (the CPU ratio is the steadier one on a shared machine).
flameprof's advantage grows with the input: perf repeats the same stack lines, which it parses
once, while the Perl script pays for every line.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

DSOS = [
    "/usr/lib/x86_64-linux-gnu/libc.so.6",
    "/opt/venv/lib/python3.12/site-packages/torch/lib/libtorch_cpu.so",
    "/usr/lib/x86_64-linux-gnu/libpython3.12.so.1.0",
    "/opt/venv/lib/python3.12/site-packages/numpy/core/_mu.so",
    "[unknown]",
    "/tmp/perf-4242.map",
]
KERNEL = [
    "entry_SYSCALL_64_after_hwframe",
    "do_syscall_64",
    "__x64_sys_futex",
    "do_futex",
    "futex_wait",
    "schedule",
    "__schedule",
    "asm_exc_page_fault",
    "exc_page_fault",
    "handle_mm_fault",
    "clear_page_erms",
]


def _symbols(rng: random.Random, n: int) -> list[tuple[str, str]]:
    out = []
    for i in range(n):
        dso = rng.choice(DSOS)
        kind = rng.random()
        if dso == "/tmp/perf-4242.map":
            name = f"py::fn_{i}:/srv/app/model_{i % 40}.py"
        elif dso == "[unknown]":
            name = "[unknown]"
        elif kind < 0.3:
            name = f"at::native::op_{i}(at::Tensor const&, c10::Scalar const&)"
        elif kind < 0.4:
            name = f"(anonymous namespace)::kernel_{i}<float>"
        else:
            name = f"func_{i}"
        out.append((name, dso))
    return out


def _line(name: str, dso: str, base: int, off: int) -> str:
    """One stack line; the address is the symbol's base plus the offset, as perf prints it."""
    suffix = f"+0x{off:x}" if name != "[unknown]" else ""
    return f"\t{base + off:16x} {name}{suffix} ({dso})"


def generate(path: str, size_mb: float, seed: int = 1) -> int:
    """Write about ``size_mb`` MB of perf script text; returns the number of samples."""
    rng = random.Random(seed)
    symbols = _symbols(rng, 3000)
    bases = [rng.randrange(0x1000, 0x7FFFFFFF) << 12 for _ in symbols]
    hot = [[rng.randrange(1, 0x400) for _ in range(rng.randint(1, 24))] for _ in symbols]
    # Call paths drawn from one call tree, as in a real program: callers near the root are shared
    # by most paths (same return address, same line), variety grows towards the leaves.
    children: dict[tuple, list[tuple]] = {}
    paths = []
    for _ in range(4000):
        node: tuple = ()
        lines = []
        for depth in range(rng.randint(8, 60)):
            kids = children.setdefault(node, [])
            if not kids or rng.random() < min(0.5, 0.02 + depth * 0.015):
                sym = rng.randrange(len(symbols))
                kids.append(node + ((sym, rng.randrange(1, 0x40)),))
            node = rng.choice(kids)
            sym, off = node[-1]
            lines.append(_line(*symbols[sym], bases[sym], off))
        leaf_sym = node[-1][0]
        lines.pop()
        if rng.random() < 0.1:  # perf prints inlined callers as their own "(inlined)" lines
            lines.append(_line(f"inlined_helper_{len(paths)}", "inlined", 0x1000, rng.randrange(1, 0x40)))
        paths.append((leaf_sym, "\n".join(reversed(lines))))
    kernel_tail = "\n".join(
        f"\t{0xFFFFFFFF81000000 + i * 0x1234:16x} {k}+0x{i * 7 + 3:x} ([kernel.kallsyms])"
        for i, k in enumerate(reversed(KERNEL))
    )
    weights = [1.0 / (i + 1) ** 0.8 for i in range(len(paths))]
    comms = [("python3", 4242, 4242), ("python3", 4242, 4250), ("pt_data_worker", 4301, 4301)]
    target = int(size_mb * 1e6)
    written = samples = 0
    clock = 1000.0
    with open(path, "w") as fh:
        while written < target:
            batch = []
            for leaf_sym, body in rng.choices(paths, weights, k=2000):
                comm, pid, tid = rng.choice(comms)
                clock += 0.001001
                head = f"{comm} {tid:>6} [{rng.randrange(4):03d}] {clock:.6f}: {1001001:>10} cpu-clock:ppp: "
                leaf = _line(*symbols[leaf_sym], bases[leaf_sym], rng.choice(hot[leaf_sym]))
                kern = kernel_tail + "\n" if rng.random() < 0.05 else ""
                batch.append(f"{head}\n{kern}{leaf}\n{body}\n\n")
            text = "".join(batch)
            fh.write(text)
            written += len(text)
            samples += len(batch)
    return samples


def _timed(cmd: list[str], out_path: str) -> tuple[float, float]:
    """Wall-clock and CPU (user + system) seconds of one run of ``cmd``, stdout to ``out_path``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    with open(out_path, "wb") as out:
        subprocess.run(cmd, stdout=out, stderr=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _report(name: str, runs: list[tuple[float, float]], size_mb: float) -> tuple[float, float]:
    wall = statistics.median(r[0] for r in runs)
    cpu = statistics.median(r[1] for r in runs)
    print(
        f"{name:<24} median wall {wall:6.2f} s ({size_mb / wall:6.1f} MB/s), "
        f"CPU {cpu:6.2f} s ({size_mb / cpu:6.1f} MB/s) over {len(runs)} runs"
    )
    return wall, cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--perl-script",
        default=os.environ.get("FLAMEPROF_STACKCOLLAPSE_PL"),
        help="path of stackcollapse-perf.pl (or env FLAMEPROF_STACKCOLLAPSE_PL)",
    )
    parser.add_argument(
        "--size-mb", type=float, default=200.0, help="size of the generated input (default 200)"
    )
    parser.add_argument("--runs", type=int, default=3, help="interleaved runs of each tool (default 3)")
    parser.add_argument("--input", help="use this perf script text instead of generating one")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="flameprof-bench-") as tmp:
        path = args.input
        if not path:
            path = os.path.join(tmp, "perf.txt")
            samples = generate(path, args.size_mb)
            print(f"generated {path}: {os.path.getsize(path) / 1e6:.0f} MB, {samples} samples")
        size_mb = os.path.getsize(path) / 1e6
        ours_cmd = [sys.executable, "-m", "flameprof", "collapse", "perf", path]
        env_path = os.environ.get("PYTHONPATH", "")
        os.environ["PYTHONPATH"] = REPO + (os.pathsep + env_path if env_path else "")
        perl_cmd = ["perl", args.perl_script, path] if args.perl_script else None
        if perl_cmd and not os.path.isfile(args.perl_script):
            print(f"stackcollapse-perf.pl not found at {args.perl_script}; timing flameprof only")
            perl_cmd = None
        if perl_cmd is None:
            print(
                "no stackcollapse-perf.pl given (--perl-script or FLAMEPROF_STACKCOLLAPSE_PL): "
                "timing flameprof only, no ratio"
            )
        ours_runs, perl_runs = [], []
        ours_out, perl_out = os.path.join(tmp, "ours.folded"), os.path.join(tmp, "perl.folded")
        for _ in range(args.runs):
            if perl_cmd:
                perl_runs.append(_timed(perl_cmd, perl_out))
            ours_runs.append(_timed(ours_cmd, ours_out))
        ours = _report("flameprof collapse perf", ours_runs, size_mb)
        if perl_cmd:
            perl = _report("stackcollapse-perf.pl", perl_runs, size_mb)
            with open(ours_out, "rb") as a, open(perl_out, "rb") as b:
                identical = a.read() == b.read()
            print(
                f"throughput ratio flameprof / perl: wall {perl[0] / ours[0]:.2f}x, CPU "
                f"{perl[1] / ours[1]:.2f}x "
                f"(target >= 20x)"
            )
            print(f"outputs identical: {identical}")
            return 0 if identical else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
