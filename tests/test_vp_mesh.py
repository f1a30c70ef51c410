"""The vocab-parallel kernels on a data x tensor parallel mesh (suites/vp_ce/mesh.py): the ranks'
places, subgroups of simulated ranks, the meshes' cases in the grids, and a mesh run on four
real gloo ranks where a kernel handed the world's rank for the group's fails and ours passes."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

from ligerbench.builtin import default_registry
from ligerbench.cli import app
from ligerbench.distributed.simulated import run_ranks
from ligerbench.problems import Outcome
from ligerbench.suites.vp_ce.axes import case as vp_ce_case
from ligerbench.suites.vp_ce.mesh import Mesh, replicas_joined, world_group_of, world_rank_of


# contiguous: torch's (dp, tp) mesh; strided: its transpose (Liger-Kernel's TP4 subgroups {0,2}, {1,3})
@pytest.mark.parametrize(
    "mesh, groups",
    [
        (Mesh(tp=2, dp=2), [[0, 1], [2, 3]]),
        (Mesh(tp=2, dp=2, strided=True), [[0, 2], [1, 3]]),
        (Mesh(tp=4, dp=2), [[0, 1, 2, 3], [4, 5, 6, 7]]),  # eight ranks: one node
        (Mesh(tp=4, dp=2, strided=True), [[0, 2, 4, 6], [1, 3, 5, 7]]),
        (Mesh(tp=3), [[0, 1, 2]]),
    ],
)
def test_a_mesh_places_every_rank_once(mesh, groups):
    assert mesh.groups() == groups
    for replica, ranks in enumerate(groups):
        for place, r in enumerate(ranks):
            assert mesh.position(r) == (replica, place) and mesh.world_rank(replica, place) == r
    assert mesh.procs == sum(len(g) for g in groups)


def test_simulated_subgroups_know_their_world_and_meet_only_their_own():
    def body(place, group):
        t = torch.tensor([float(world_rank_of(group))])
        out = torch.empty(group.size(), 1)
        group.all_gather_into_tensor(out, t)  # the subgroup's members only
        whole = world_group_of(group)
        everyone = torch.empty(whole.size(), 1)
        whole.all_gather_into_tensor(everyone, t)  # the whole world
        return place, out.flatten().tolist(), everyone.flatten().tolist()

    got = run_ranks(4, body, groups=[[0, 2], [1, 3]], timeout_s=10)
    assert [g[0] for g in got] == [0, 0, 1, 1]  # world ranks 0..3: places in {0,2} and {1,3}
    assert got[0][1] == got[2][1] == [0.0, 2.0] and got[1][1] == got[3][1] == [1.0, 3.0]
    assert all(g[2] == [0.0, 1.0, 2.0, 3.0] for g in got)


def test_subgroups_must_cover_the_world():
    with pytest.raises(ValueError, match="exactly once"):
        run_ranks(4, lambda place, group: None, groups=[[0, 1], [1, 2]], timeout_s=5)


def test_replicas_are_joined_on_dim_0_and_flags_by_their_least():
    a = Outcome(values={"loss": torch.ones(2, 3), "flag": torch.tensor(1.0), "none": None})
    b = Outcome(values={"loss": torch.zeros(2, 3), "flag": torch.tensor(0.0), "none": torch.ones(1)})
    joined = replicas_joined([a, b])
    assert joined.values["loss"].shape == (4, 3) and joined.values["loss"][:2].eq(1).all()
    assert float(joined.values["flag"]) == 0.0 and joined.values["none"] is None


@pytest.mark.parametrize("kernel", ["vp_ce", "vp_flce", "vp_flp"])
def test_every_grid_has_four_ranks_and_both_meshes(kernel):
    spec = default_registry().kernels[kernel]
    cases = spec.grid("quick", "cpu")
    assert {(c.world, c.mesh) for c in cases} >= {(2, "flat"), (3, "flat"), (4, "flat"), (2, "dp2"), (2, "dp2_strided")}
    # `verify --nproc 4` runs the four-rank cases and the 2 x 2 meshes, and they hold both dtypes
    four = [c for c in cases if spec.ranks(c) == 4]
    assert {c.mesh for c in four} == {"flat", "dp2", "dp2_strided"} and {c.dtype for c in four} == {"fp32", "bf16"}


def test_a_mesh_case_id_names_it_and_a_flat_one_keeps_its_old_id():
    assert vp_ce_case(n=16, v=501, dtype="fp32", world=2).id.endswith("/w2/targets-random")
    assert vp_ce_case(n=16, v=501, dtype="fp32", world=2, mesh="dp2_strided").id.endswith("/mesh-dp2_strided")


@pytest.mark.interpreter
@pytest.mark.slow(seconds=40)
def test_a_mesh_on_four_real_gloo_ranks_fails_the_world_rank_and_passes_ours(tmp_path):
    """The gloo form of the 2 x 2 meshes: four processes, two tensor-parallel subgroups each
    (contiguous and strided); ours passes, a kernel handed the world rank as its vocabulary
    offset fails on both meshes (and only there: on one group the two ranks agree)."""
    args = ["verify", "--kernel", "vp_ce", "--nproc", "4", "--device", "cpu", "--preset", "quick",
            "--where", "dtype=fp32", "--where", "option=plain", "--where", "ignore_pattern=random_10",
            "--where", "reduction=mean", "--provider", "ours", "--provider", "mutant_vp_world_rank_offset",
            "--out", str(tmp_path), "--json"]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1, result.output
    payload = json.loads(result.stdout[result.stdout.index("{") :])
    run = tmp_path / payload["run_id"]
    env = json.loads((run / "env.json").read_text())
    assert env["nproc"] == 4 and env["backend"] == "gloo" and env["launch_returncode"] == 0
    records = pd.read_csv(run / "records.csv")
    assert {"mesh-dp2", "mesh-dp2_strided"} <= {c.rsplit("/", 1)[-1] for c in records["case"]}
    ours, bad = records[records["provider"] == "ours"], records[records["provider"] != "ours"]
    assert len(ours) and (ours["verdict"] == "pass").all()
    failed = set(bad.loc[bad["verdict"] == "fail", "case"])
    assert {c for c in failed if "/mesh-" in c} == {c for c in set(bad["case"]) if "/mesh-" in c} != set()
    assert not {c for c in failed if "/mesh-" not in c}  # the four-rank flat case: world rank = group rank
