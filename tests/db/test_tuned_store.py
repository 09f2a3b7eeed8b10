"""The tuned_configs table: tune writes the best knobs, recommend reads them back with stdlib sqlite3."""

from __future__ import annotations

from db.queries import connect_readonly
from db.store import Store
from support.paths import FIXTURES

from db.tuned import TunedConfig, best_tuned, save_tuned

SHAPE = dict(hidden=7168, top_k=8, experts=256, activation_dtype="nvfp4", world_size=8)


def config(status, env, gain, created_at):
    return TunedConfig(host_class="hgx-b200", machine_id="m1", device="cuda",
                       backend="allgather_reducescatter", status=status, stop="settled", study="s",
                       knobs=env, env=env, gain=gain, gain_halfwidth=0.01, created_at=created_at, **SHAPE)


def test_recommend_reads_the_newest_configuration_with_a_measured_gain(db_path):
    with Store(db_path) as store:
        save_tuned(store, config("gain", {"NCCL_PROTO": "LL"}, 0.12, "2026-11-30T01:00:00Z"))
        save_tuned(store, config("gain", {"NCCL_PROTO": "Simple"}, 0.08, "2026-11-30T02:00:00Z"))
        save_tuned(store, config("no_gain", {}, 0.001, "2026-11-30T03:00:00Z"))
    conn = connect_readonly(db_path)
    got = best_tuned(conn, host_class="hgx-b200", backend="allgather_reducescatter", **SHAPE)
    assert (got.env, got.gain, got.flags) == ({"NCCL_PROTO": "Simple"}, 0.08, [])
    assert best_tuned(conn, host_class="other", backend="allgather_reducescatter", **SHAPE) is None


def test_recommend_prints_the_tuned_knobs_of_its_pick_with_their_gain(tmp_path):
    from db.importing import import_file

    from autoselect.selector import recommend_for

    db = tmp_path / "fixtures.db"
    import_file(db, FIXTURES / "results" / "b200.jsonl")
    model = str(FIXTURES / "models" / "deepseek-r1-nvfp4")
    before = recommend_for(model, db_path=db, host_class="b200x8-9a4f2b61", workload="prefill")
    assert before.backend == "flashinfer_nvlink_one_sided" and before.knobs == {}
    with Store(db) as store:
        save_tuned(store, TunedConfig(
            host_class="b200x8-9a4f2b61", machine_id="m1", hidden=7168, top_k=8, experts=256,
            activation_dtype=before.activation_dtype, world_size=before.deployment.world_size, device="cuda",
            backend="flashinfer_nvlink_one_sided", status="gain", stop="settled", study="s",
            knobs={"TLLM_MOE_A2A_COMBINE_BLOCK_SIZE": "512"}, env={"TLLM_MOE_A2A_COMBINE_BLOCK_SIZE": "512"},
            gain=0.07, gain_halfwidth=0.02))
    after = recommend_for(model, db_path=db, host_class="b200x8-9a4f2b61", workload="prefill")
    assert after.backend == before.backend
    assert after.knobs["env"] == {"TLLM_MOE_A2A_COMBINE_BLOCK_SIZE": "512"}
    assert (after.knobs["gain"], after.knobs["gain_halfwidth"]) == (0.07, 0.02)
    assert after.env["TLLM_MOE_A2A_COMBINE_BLOCK_SIZE"] == "512"
    assert after.command.startswith("TLLM_MOE_A2A_COMBINE_BLOCK_SIZE=512 vllm serve ")
