"""perf/regret_reference.py's certificates, checked against brute force on small made-up workloads.

The script proves a regret goal infeasible when no policy that picks without knowing the default's
factor can meet it (``feasibility``: an exact count over the ways to assign keep / switch), and
says which two workloads no monotone tie rule can both get right (``evidence_pair``). Both are
claims about every policy, so they are checked here against every assignment of small cases.
"""

from __future__ import annotations

import itertools
import random
from types import SimpleNamespace

import pytest

from support.paths import REPO, load_script
from autoselect.workload import Shape, WorkloadSpec

R = load_script(REPO / "perf" / "regret_reference.py")
GOALS = load_script(REPO / "perf" / "goals.py")
CANDIDATE = "deepep_high_throughput"


def workload(default_us: float, candidate_us: float, seen: float | None = None, band: float = 0.0,
             default_band: float = 1.0, candidate: str = CANDIDATE) -> R.Scored:
    """One single-bucket workload: the default derived at ``default_us`` (truth = factor x it), one
    published candidate whose truth is ``candidate_us``, seen by the selector at ``seen`` +- ``band``."""
    point = SimpleNamespace(bound=False)
    case = R.Case("ref-test", 8, Shape(hidden=7168, top_k=8, experts=256, dtype="bf16"),
                  {R.AGRS: {64: point}, candidate: {64: point}}, {}, 8192, (64,), "sm100",
                  values={R.AGRS: {64: default_us}, candidate: {64: candidate_us}})
    seen_us = candidate_us if seen is None else seen
    return R.Scored("token counts", "decode", case, WorkloadSpec("decode", ((64, 1.0),)),
                    {"autoselect": R.AGRS}, {R.AGRS, candidate}, {R.AGRS: default_us, candidate: seen_us},
                    {R.AGRS: default_band, candidate: band})


def brute_force_least_excess(scored, threshold: float, q: float) -> int:
    """min over every keep/switch assignment of max over factors of (over threshold - allowed)."""
    allowed = R.allowed_over(len(scored), q)
    options = [list(R.oracle_regrets(s).values()) for s in scored]
    best = None
    for pick in itertools.product(*options):
        over = [sum(r[sc] > threshold for r in pick) - allowed for sc in R.DIAGONAL]
        best = max(over) if best is None else min(best, max(over))
    return best


def brute_force_least_quantile(scored, q: float) -> float:
    options = [list(R.oracle_regrets(s).values()) for s in scored]
    return min(max(R.pct([r[sc] for r in pick], q) for sc in R.DIAGONAL) for pick in itertools.product(*options))


def test_allowed_over_is_what_pct_lets_exceed():
    for n in range(1, 60):
        values = sorted(random.Random(n).uniform(1, 2) for _ in range(n))
        a = R.allowed_over(n, 0.95)
        # the a largest may exceed pct's value, one more may not
        assert R.pct(values, 0.95) == values[n - 1 - a]
    assert R.allowed_over(100, 1.0) == 0


def test_a_candidate_near_the_default_misses_p95_at_one_end_of_the_factor_range_whatever_is_picked():
    # truth 120 against a default of 100: kept, 1.5 x 100 / 120 = 1.25 at x1.5; switched, 1.2 at x1.0
    x = {f: (f, f) for f in R.FACTORS}
    options = R.oracle_regrets(workload(100, 120))
    assert options["keep"][x[1.0]] == 1.0 and options["keep"][x[1.5]] == pytest.approx(1.25)
    assert options["switch"][x[1.0]] == pytest.approx(1.2) and options["switch"][x[1.5]] == 1.0
    # truth 60: switching is best at every factor (0.75 x 100 = 75 > 60): never over, never ambiguous
    far = R.oracle_regrets(workload(100, 60))
    assert max(far["switch"].values()) == 1.0
    fz = R.feasibility([workload(100, 120)] + [workload(100, 60)] * 19, 1.05, 0.95)  # 20: none may be over
    assert not fz.feasible and fz.least_excess == 1
    assert sum(len(g) for g in fz.ambiguous.values()) == 1
    assert "at most 0 + 0 = 0 may be" in fz.proof
    # with 100 workloads four may be over at each factor: four ambiguous ones fit (kept or not), nine do not
    assert R.feasibility([workload(100, 120)] * 4 + [workload(100, 60)] * 96, 1.05, 0.95).feasible
    fz = R.feasibility([workload(100, 120)] * 9 + [workload(100, 60)] * 91, 1.05, 0.95)
    assert not fz.feasible and fz.least_excess == 1  # 9 over split 5 / 4 at best, 4 allowed
    assert "at least 9 are over 1.05 whatever is picked, and at most 4 + 4 = 8 may be" in R.certificate(fz)


def test_a_both_phase_max_is_decided_workload_by_workload_over_every_pair_of_factors():
    scored = [workload(100, 60), workload(100, 400)]  # switch always, keep always: never over anywhere
    fz = R.feasibility(scored, 1.3, 1.0, scenarios=R.PAIRS)
    assert fz.feasible and R.least_quantile(scored, 1.0, scenarios=R.PAIRS) == pytest.approx(1.0)
    near = workload(100, 100)  # 0.75 x 100 against 100, or 100 against 1.5 x 100: sqrt(2) at best
    assert not R.feasibility(scored + [near], 1.3, 1.0, scenarios=R.PAIRS).feasible
    assert R.least_quantile([near], 1.0, scenarios=R.PAIRS) == pytest.approx(1 / 0.75)


@pytest.mark.parametrize("seed", range(12))
def test_feasibility_and_the_least_quantile_equal_brute_force_over_every_assignment(seed):
    rng = random.Random(seed)
    scored = [workload(100, rng.uniform(70, 170)) for _ in range(rng.randint(6, 12))]
    for threshold, q in ((1.05, 0.8), (1.05, 0.9), (1.15, 0.8), (1.3, 1.0), (1.1, 1.0)):
        fz = R.feasibility(scored, threshold, q)
        assert fz.least_excess == brute_force_least_excess(scored, threshold, q), (threshold, q)
        assert fz.feasible == (fz.least_excess <= 0)
        if not fz.feasible:
            assert fz.proof
    for q in (0.8, 1.0):
        assert R.least_quantile(scored, q) == pytest.approx(brute_force_least_quantile(scored, q))


def test_the_max_is_always_within_sqrt2_for_a_policy_that_knows_the_candidates_truth():
    # keep when the candidate is truly above the default's middle, else switch: at most sqrt(1.5 / 0.75) over
    rng = random.Random(7)
    scored = [workload(100, rng.uniform(50, 300)) for _ in range(200)]
    assert R.least_quantile(scored, 1.0) <= 2 ** 0.5 + 1e-9
    assert R.feasibility(scored, 2 ** 0.5 + 1e-9, 1.0).feasible


def test_evidence_pair_finds_two_workloads_no_monotone_rule_gets_both_right():
    keep = workload(100, 140, seen=110, band=5)  # looks 10 % slower, truly 40 %: must keep
    switch = workload(100, 95, seen=125, band=5)  # looks 25 % slower, truly 5 % faster: must switch
    assert R.evidence_pair([keep, switch], 1.3) == (keep, switch)
    # every tie rule of recommend's form that takes `switch` takes `keep` too
    assert R.looks_no_worse(R.evidence(keep, CANDIDATE), R.evidence(switch, CANDIDATE))
    # once the evidence orders them the right way round, a rule can tell them apart
    assert R.evidence_pair([workload(100, 140, seen=130, band=5), switch], 1.3) is None
    # a wider band on the must-keep side is not "no worse" at its upper end
    assert R.evidence_pair([workload(100, 140, seen=110, band=30), switch], 1.3) is None
    # another backend: a rule may treat backends differently
    low_latency = workload(100, 140, seen=110, band=5, candidate="deepep_low_latency")
    assert R.evidence_pair([low_latency, switch], 1.3) is None


def test_goals_prints_an_infeasible_goal_with_its_proof_and_does_not_judge_it(capsys):
    goals = GOALS.Goals(quick=False)
    goals.check("exact", "0", "0", True, GOALS.EXACT)
    goals.infeasible("p95", "1.12", "<= 1.05", "311 ambiguous, 268 allowed")
    assert goals.finish() == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1] == "goal p95: 1.12 (goal <= 1.05): infeasible, not judged: 311 ambiguous, 268 allowed"
    assert out[-1] == "goals: 1 met, 0 missed, 1 infeasible"  # a full run judges every goal it can


def test_only_a_reduced_run_says_what_it_left_unjudged(capsys):
    quick, full = GOALS.Goals(quick=True), GOALS.Goals(quick=False)
    for goals in (quick, full):
        goals.check("wall", "1.2x", "<= 2x", True)
        assert goals.finish() == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1] == "goals: 0 met, 0 missed, 1 not judged (quick)"
    assert out[3] == "goals: 1 met, 0 missed"


def test_a_dataset_goal_is_judged_in_the_full_mode_only(capsys):
    quick, full = GOALS.Goals(quick=True), GOALS.Goals(quick=False)
    quick.check("regret", "1.4", "<= 1.3", False, GOALS.DATASET)
    full.check("regret", "1.4", "<= 1.3", False, GOALS.DATASET)
    assert quick.finish() == 0 and full.finish() == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "goal regret: 1.4 (goal <= 1.3): not met, not judged (quick)"
    assert out[1] == "goal regret: 1.4 (goal <= 1.3): MISSED"


def test_a_bucket_above_a_backends_step_budget_is_true_as_the_steps_vllm_runs_summed():
    # the truth the selector's stepped price is judged against: 1000 tokens/rank under DeepEP
    # low-latency's 256-token step budget are three steps of 256 and one of 232, each on its own curve
    ll = "deepep_low_latency"
    point = SimpleNamespace(bound=False)
    case = R.Case("ref-test", 8, Shape(hidden=7168, top_k=8, experts=256, dtype="bf16"),
                  {R.AGRS: {1000: point}, ll: {128: point, 256: point, 1024: point}}, {}, 8192, (1000,), "sm100",
                  values={R.AGRS: {1000: 100.0}, ll: {128: 10.0, 256: 20.0, 1024: 100.0}}, caps={ll: 256})
    rest = 10.0 + (20.0 - 10.0) * (232 - 128) / (256 - 128)
    assert case.truth(ll, 1000, (1.0, 1.0)) == pytest.approx(3 * 20.0 + rest)
    assert case.truth(ll, 256, (1.0, 1.0)) == 20.0  # at the budget: one step, its own value
    assert case.truth(ll, 868, (1.0, 1.0)) is None  # its last step (100 tokens) is below the curve: no truth


def test_the_step_budgets_of_a_case_are_the_selectors():
    caps = R.step_caps(Shape(hidden=7168, top_k=8, experts=256, dtype="nvfp4"), "ref-b200_sxm-x8", 8,
                       [R.AGRS, "deepep_low_latency"], "0.34.0")
    assert caps["deepep_low_latency"] == 256
    assert caps[R.AGRS] > 256  # vLLM's default budget for the GPUs, per rank
