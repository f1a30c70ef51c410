"""Repeatable chores: `nox -s tests`, `nox -s lint`, `nox -s verify`.

Sessions reuse the current interpreter's packages (venv_backend="none") so that the torch
already installed (CPU wheel here, CUDA build on a GPU box) is the one used."""

import nox

nox.options.sessions = ["lint", "tests", "verify"]


@nox.session(venv_backend="none")
def tests(session):
    session.run("python", "-m", "pytest", "-q", *session.posargs)


@nox.session(venv_backend="none")
def lint(session):
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session(venv_backend="none")
def verify(session):
    session.run("ligerbench", "verify", "--preset", "quick", *session.posargs)
