"""Pick the fastest legal all2all backend for a model, deployment and workload.

The decision is a pipeline of short steps over a frozen target (``pipeline.py`` runs them):

1. **Target** (``target.py``): the model's dispatch dtype on the target arch, the deployment,
   the host (class), the workload, and the legality target with its vLLM version
   (:func:`autoselect.candidates.resolve_target`, as every command resolves it).
2. **Evidence** (``evidence.py``): per backend, the measured points of this host class for the
   shape and EP size (newest up-to-date row per token count, band widened to the run-to-run
   spread), or what disqualifies it; evidence sources are pluggable, strongest kind first.
3. **Judge** (``judge.py``): every backend the rules know for that vLLM becomes a candidate or
   a rejection (illegal / disqualified / unavailable); the latency model ``latency = a + bytes /
   bandwidth`` (``estimate.py``) fills the buckets nobody measured, marked and banded wider.
4. **Decide** (``decide.py``): a candidate beats vLLM's default only when its workload-weighted
   band clears the default's (:func:`autoselect.noise.band_compare`); else the default stays.
   Every candidate then gets its verdict word, and the decision its sentence and data
   (``wording.py``: the one table of verdict words, ``VERDICTS``).
5. **Confidence** (``confidence.py``): a rule table of caps (said in one sentence with the expected
   end-to-end effect: ``wording.py``).
6. **Caveats** (``caveats.py``): warnings (close call, CPU data, stale versions, extrapolation).
7. **Flags** (``flags.py``): tuned knobs, ``vllm serve`` flags, environment, the command line,
   and the ``autoselect bench`` command that would settle an open answer.
8. **Checks** (``e2e.py``): stored end-to-end results and, on request, vLLM's own parser.

``answer.py`` holds the dataclasses that are the JSON document; ``render.py`` the text forms;
``given.py`` decides from reference points a caller gives (the hold-outs of
``perf/regret_reference.py``), with any :class:`DecisionPolicy` of ``decide.py``'s rules.
Fast path: the standard library and autoselect's pure-Python modules only (no torch, numpy,
sqlite_utils or optuna); the database is read with stdlib ``sqlite3``.
"""

from autoselect.lazy import lazy_exports
from autoselect.selector.decide import BOUND_RULES, DEFAULT_POLICY, KEEPS_TIES, TIE_RULES, DecisionPolicy
from autoselect.selector.estimate import MeasuredPoint, estimate_latency
from autoselect.selector.pipeline import recommend, recommend_for, target_host
from autoselect.selector.render import render_args, render_env, render_text
from autoselect.selector.target import STALENESS_KEYS

#: Re-exports loaded on first use (:mod:`autoselect.lazy`): only the regret study decides from
#: given reference points; an answer never builds them.
_LAZY = {"given": ("GivenReference", "decide_again", "estimate_given", "recommend_given")}
__getattr__, __dir__ = lazy_exports(__name__, _LAZY)

__all__ = [
    "BOUND_RULES", "DEFAULT_POLICY", "KEEPS_TIES", "STALENESS_KEYS", "TIE_RULES", "DecisionPolicy", "GivenReference",
    "MeasuredPoint", "decide_again", "estimate_given", "estimate_latency", "recommend", "recommend_for", "recommend_given",
    "render_args", "render_env", "render_text", "target_host",
]
