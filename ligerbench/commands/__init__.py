"""The commands: one module per command of the CLI (verify, bench, converge, selftest, gate,
report, list) and the ranks' entry point (ranks.py). Each holds its options, its selection and
one call into the machinery; ligerbench/cli.py adds them to the Typer app. Only this folder and
the CLI import ligerbench.builtin (what is registered)."""
