"""A rank's Python warnings go to its log in the run folder, and the parent says so once."""

import warnings

from ligerbench.distributed.launch import WARNINGS_LOG, warnings_note, warnings_to_file


def test_a_ranks_warnings_go_to_its_file_not_its_output(tmp_path, capsys):
    path = tmp_path / WARNINGS_LOG.format(rank=1)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        with warnings_to_file(path):
            warnings.warn("returned a view tensor", UserWarning, stacklevel=1)
            warnings.warn("second", DeprecationWarning, stacklevel=1)
        shown = warnings.showwarning
    assert "returned a view tensor" in path.read_text() and "DeprecationWarning: second" in path.read_text()
    assert "view tensor" not in capsys.readouterr().err  # not in the output the parent echoes
    assert shown is warnings.showwarning  # put back


def test_the_note_counts_every_ranks_warnings(tmp_path):
    assert warnings_note(tmp_path) is None  # no rank warned: nothing said
    for rank in (0, 1):
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            with warnings_to_file(tmp_path / WARNINGS_LOG.format(rank=rank)):
                warnings.warn(f"w{rank}", UserWarning, stacklevel=1)
    note = warnings_note(tmp_path)
    assert note is not None and "2 Python warnings" in note and "warnings-rank*.log" in note
