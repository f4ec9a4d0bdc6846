"""flameprof in Jupyter and IPython: ``%load_ext flameprof``, then ``%%flameprof`` on a cell or
``%flameprof statement`` on a line.

The cell runs as it would without the magic (its output, its result and its exception are shown as
usual), sampled in the kernel's process; below it come the verdict and phases in a line, and the
HTML report with its interactive flame graph, self-contained (it works offline) and isolated in an
iframe so its script and style stay out of the notebook's. Imported only by ``%load_ext``.
"""

from __future__ import annotations

import html

from IPython.core.interactiveshell import InteractiveShell
from IPython.core.magic import Magics, line_cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from IPython.display import HTML, display

from ..collect.engine.session import SESSION
from ..profiler import Profiler
from ..render.formats import Rendering
from ..render.html_report import render_html
from ..render.options import OutputOptions
from ..render.outputs import write_outputs
from ..render.report import phase_lines

FRAME_HEIGHT = 900  # pixels of the report's iframe


@magics_class
class FlameprofMagics(Magics):
    @magic_arguments()
    @argument("--rate", type=float, default=200.0, help="samples per second (default: 200)")
    @argument("--mode", choices=("wall", "cpu"), default="wall", help="weight shown (default: wall)")
    @argument("--view", choices=("code", "layers", "phases"), default="code", help="flame graph stacks")
    @argument("-o", "--output", metavar="DIR", help="also write profile.flameprof, .folded and .svg here")
    @argument("statement", nargs="*", help="the statement to profile (line magic)")
    @line_cell_magic
    def flameprof(self, line: str, cell: str | None = None) -> None:
        """Profile a cell (``%%flameprof``) or a statement (``%flameprof stmt``) and show the report."""
        args = parse_argstring(self.flameprof, line)
        code = cell if cell is not None else " ".join(args.statement)
        assert self.shell is not None  # a magic runs in its shell
        # the profile starts at the cell, not in IPython's machinery
        SESSION.add_boundary_codes([InteractiveShell.run_code.__code__])
        profiler = Profiler(rate=args.rate, mode=args.mode).start()
        try:
            self.shell.run_cell(code, store_history=False)  # shows output, result and exception as usual
        finally:
            show(profiler.stop(), OutputOptions(mode=args.mode, view=args.view), args.output)


def show(profile, options: OutputOptions, output: str | None = None) -> None:
    """Display the verdict, the phases and the HTML report of ``profile`` below the cell."""
    rendering = Rendering(profile, options, source="notebook cell")
    if output:
        write_outputs(rendering, output)
    report = rendering.report
    shares = ", ".join(
        f"{n} {p}" for n, _, p, _ in phase_lines(report.basis_phases()) if not n.startswith(" ")
    )
    page = render_html(report, profile, options, rendering.flame_tree(phases=True))
    verdict = html.escape(report.verdict.text)
    display(
        HTML(
            f"<p><b>flameprof</b>: {verdict}<br>phases: {html.escape(shares)}</p>"
            f'<iframe srcdoc="{html.escape(page, quote=True)}" style="width:100%;height:{FRAME_HEIGHT}px;'
            f'border:1px solid #ddd"></iframe>'
        )
    )


def load(ipython) -> None:
    """Register the magics (``%load_ext flameprof`` calls this)."""
    ipython.register_magics(FlameprofMagics)
