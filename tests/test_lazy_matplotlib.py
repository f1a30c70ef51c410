"""matplotlib is imported when a figure is drawn, not by the CLI: on a fresh machine its first
import builds the font cache (12 s on the H100 box), which `verify` paid without drawing."""

from __future__ import annotations

import subprocess
import sys


def test_the_cli_imports_no_matplotlib_until_a_figure_is_drawn():
    code = (
        "import sys, ligerbench.cli, ligerbench.commands.bench, ligerbench.commands.report\n"
        "print('matplotlib' in sys.modules)\n"
        "from ligerbench.plotting import pyplot\n"
        "pyplot()\n"
        "print('matplotlib' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["False", "True"]
