"""The grammars of autoselect's list and duration options, and the defaults several commands share.

Every command that takes one of these parses it here, so ``bench --tokens``, ``fleet run
--tokens``, ``confirm --tokens`` and ``recommend --tokens`` accept and refuse the same text, and
``tune --budget``, ``fleet run --budget`` and ``fleet schedule --every`` read the same durations.

The grammars (each written once, here):

**Integer list** (:func:`parse_int_list`): ``ITEM[,ITEM...]``. An item is one or more ASCII digits
``0-9``, optionally with spaces around it; no sign, no ``_``, no exponent, no other script's
digits. Every item lies in ``[minimum, maximum]`` (default ``1`` .. :data:`MAX_INT`). An empty item
(``1,,2``, a trailing comma) or an empty list is refused. Order and repeats are kept.

**Weighted token list** (:func:`parse_weighted_tokens`): ``TOKENS[:WEIGHT][,...]``. ``TOKENS`` is
an integer-list item (at least 1); ``WEIGHT`` is an ASCII decimal (``0.5``, ``.5``, ``3``, ``1e-3``),
finite and not negative. Either every item has a weight or none has (then each counts 1).
Weights are relative: the caller normalizes them; zero-weight items are dropped, and a list whose
weights sum to zero is refused.

**Duration** (:func:`parse_duration`): a number of seconds (``90``) or one or more
``NUMBER UNIT`` groups with the units ``d``, ``h``, ``m``, ``s`` in that order, each at most once:
``90s``, ``15m``, ``1h30m``, ``7d``, ``2d12h``. ``NUMBER`` is an ASCII decimal (``1.5h``). Letters
may be upper case. Zero is refused unless the option allows it (``--jitter 0s``); negatives,
``nan``, ``inf``, an empty text, unknown units, a repeated or out-of-order unit and anything
above :data:`MAX_DURATION_S` are refused.

**Number** (:func:`parse_int`, :func:`parse_number`): every numeric option of every command
(the CLI converts them all through these two). A whole number is an optional ``-`` and ASCII
digits, within ``[-MAX_INT, MAX_INT]`` unless the option says less; a decimal is the ``WEIGHT``
grammar with an optional ``-``, finite (``nan``, ``inf`` and ``1e400`` are refused).

**Name list** (:func:`parse_name_list`): ``NAME[,NAME...]`` (``--backends``); an empty text, an
empty item or a repeated name is refused. An empty ``--backends ''`` is a mistake, not "all".

**Run reference** (:func:`parse_run_ref`): how ``db drop-run RUN`` names a run: its id (ASCII
digits without leading zeros, as ``db info`` and the errors show it) or its uid, exactly as shown: no blanks around it,
no control characters, at most :data:`MAX_NAME` characters. A text of digits may be both a run's
id and another run's uid (a uid is any short printable text once imported): the store refuses such
an ambiguity rather than pick one (:class:`RunRef` carries both readings).

Each grammar raises one error class (:class:`BadList`, :class:`BadDuration`, :class:`BadNumber`)
whose message names the option, the offending item and an example of what works. Stdlib only: this module is on
every command's fast path.
"""

from __future__ import annotations

import math
import re
from typing import NamedTuple

from autoselect.errors import UserError

#: The largest integer any count option takes (a C ``int``): what torch sizes, CUDA launch
#: parameters and SQLite integers hold with room to spare; larger values are typing mistakes.
MAX_INT = 2**31 - 1
#: The longest duration any option takes (a year): budgets, schedules and timeouts beyond it
#: are typing mistakes, and ``time.sleep`` overflows on large enough values.
MAX_DURATION_S = 365 * 86400.0

#: The largest MoE shape and deployment any command takes, measured or stored: beyond them a
#: value is a typing mistake, never a model (the largest checkpoints have hidden 7168-16384,
#: 384 experts, top-8..22, EP 64-256). Bench allocates tokens x hidden elements per rank, so
#: these also keep a typo from reaching an allocation; db/fields.py stores nothing beyond them.
MAX_HIDDEN = 1 << 20
MAX_EXPERTS = 1 << 16
MAX_WORLD_SIZE = 1 << 16
MAX_TOKENS_PER_RANK = 1 << 24
#: The largest one-sided workspace allowance (``--max-workspace-gib``) any command takes: more
#: than any GPU's memory (the largest hold 288 GiB); beyond it the value is a typing mistake, and
#: ``1e308`` GiB in bytes overflows a float.
MAX_WORKSPACE_GIB = 4096.0

#: Token counts per rank ``autoselect bench`` sweeps when --tokens is not given: the decode grid.
DEFAULT_TOKENS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
#: Token counts per rank a periodic fleet run measures by default: a cheap subset of the decode
#: grid (four points per backend per node), enough for drift checks.
FLEET_TOKENS = (1, 8, 64, 256)
#: Tokens per rank ``autoselect confirm`` runs by default: a decode batch, a large decode batch
#: and a prefill chunk of vLLM's forward pass.
CONFIRM_TOKENS = (32, 256, 4096)
#: ``autoselect confirm``'s other defaults: each decode request's KV length, graph replays per
#: sample, samples per case, and the seconds one backend's run may take (load and capture included).
CONFIRM_KV_LEN = 4096
CONFIRM_ITERS = 20
CONFIRM_SAMPLES = 5
CONFIRM_TIMEOUT_S = 1800.0
#: ``fleet drift``: a point must be at least this much slower (fraction) to count, whatever the noise
MIN_SLOWDOWN = 0.05
#: ... and slower than this many combined relative standard errors
NOISE_K = 3.0


class BadList(UserError):
    "A list option (token counts, weights) that does not follow its grammar."


class BadDuration(UserError):
    "A duration that is not a positive number with a unit (90s, 15m, 1h30m, 7d)."


# --------------------------------------------------------------------------------------
# Integer lists
# --------------------------------------------------------------------------------------

#: The grammars' patterns are strings, compiled on first use by re's cache: a command compiles only
#: those its options need (most of a start passes no number at all).
_DIGITS = r"[0-9]+"
_DECIMAL = r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"


def _items(text: str, what: str, example: str) -> list[str]:
    """The comma-separated items of ``text``, stripped; refuses an empty list or item."""
    if not str(text).strip():
        raise BadList(f"{what} {text!r} is empty; pass e.g. {example}")
    items = [item.strip(" ") for item in str(text).split(",")]
    if any(not item for item in items):
        raise BadList(f"{what} {text!r} has an empty item; separate the values by single commas, e.g. {example}")
    return items


def _integer(item: str, what: str, noun: str, minimum: int, maximum: int, example: str,
             digits: str | None = None) -> int:
    """The value of ``digits`` (default: the whole ``item``), in range; the message names ``item``."""
    digits = item if digits is None else digits
    if not re.fullmatch(_DIGITS, digits):
        raise BadList(f"{what} item {item!r} is not a whole number written in digits 0-9; e.g. {example}")
    # int() refuses texts over 4300 digits (sys.int_info): such a value is out of range anyway
    value = int(digits) if len(digits) <= 40 else maximum + 1
    if value < minimum:
        raise BadList(f"{what} item {item!r}: {noun} must be at least {minimum}")
    if value > maximum:
        raise BadList(f"{what} item {item!r}: {noun} must be at most {maximum}")
    return value


def parse_int_list(text: str, *, what: str = "--tokens", noun: str = "token counts per rank",
                   minimum: int = 1, maximum: int = MAX_TOKENS_PER_RANK, example: str = "1,16,256") -> list[int]:
    """``"1,16,256"`` -> ``[1, 16, 256]`` (the integer-list grammar in the module docstring).

    :param what: the option, for the message (``--tokens``).
    :param noun: what the values are, for the message (``token counts per rank``).
    :raises BadList: naming the first item that is wrong and why.
    """
    return [_integer(item, what, noun, minimum, maximum, example) for item in _items(text, what, example)]


def parse_weighted_tokens(text: str, *, what: str = "--tokens",
                          maximum: int = MAX_TOKENS_PER_RANK) -> list[tuple[int, float]]:
    """``"1:0.5,64:0.3,8192:0.2"`` -> ``[(1, 0.5), (64, 0.3), (8192, 0.2)]``; ``"1,64"`` -> weights 1.

    The weighted-token-list grammar of the module docstring. Zero-weight items are dropped; the
    weights are returned as given (relative), not normalized.

    :raises BadList: for an empty list or item, a malformed item, a token count below 1, a
        negative or non-finite weight, weighted and unweighted items mixed, or weights summing to 0.
    """
    example = "1:0.5,64:0.3,8192:0.2"
    if not str(text).strip():
        raise BadList(f"{what} {text!r} is empty; pass e.g. 1,64,8192 or 1:0.5,64:0.5")
    items = _items(text, what, example)
    weighted = [":" in item for item in items]
    if any(weighted) and not all(weighted):
        raise BadList(f"{what} {text!r} mixes weighted and unweighted items; give every item a weight")
    pairs = []
    for item in items:
        tokens_text, _, weight_text = (part.strip(" ") for part in item.partition(":"))
        if not re.fullmatch(_DIGITS, tokens_text) or (weighted[0] and not re.fullmatch(_DECIMAL, weight_text)):
            raise BadList(f"{what} item {item!r} is not TOKENS or TOKENS:WEIGHT; e.g. {example}")
        tokens = _integer(item, what, "token counts per rank", 1, maximum, example, digits=tokens_text)
        weight = float(weight_text) if weighted[0] else 1.0
        if not math.isfinite(weight):
            raise BadList(f"{what} item {item!r}: weights must be finite and non-negative")
        pairs.append((tokens, weight))
    if sum(w for _, w in pairs) <= 0:
        raise BadList(f"{what} {text!r}: the weights sum to zero; give some bucket a weight")
    return [(t, w) for t, w in pairs if w > 0]


# --------------------------------------------------------------------------------------
# Single numbers and name lists (every numeric command-line option goes through these)
# --------------------------------------------------------------------------------------

_SIGNED_DIGITS = r"-?[0-9]+"
_SIGNED_DECIMAL = r"-?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"


class BadNumber(UserError):
    "A numeric option that is not a number in ASCII digits, or out of its range."


def parse_int(text: str, *, what: str, minimum: int = -MAX_INT, maximum: int = MAX_INT) -> int:
    """One whole number: an optional ``-`` and ASCII digits ``0-9`` (no other script's digits,
    no ``_``, no ``+``, no exponent), in ``[minimum, maximum]``.

    :param what: the option, for the message (``--dp``).
    :raises BadNumber: for anything else.
    """
    s = str(text).strip(" \t")  # ASCII blanks only: a no-break space is a typing accident too
    if not re.fullmatch(_SIGNED_DIGITS, s):
        raise BadNumber(f"{what} {text!r} is not a whole number written in digits 0-9")
    value = int(s) if len(s) <= 40 else (maximum + 1 if not s.startswith("-") else minimum - 1)
    if value < minimum:
        raise BadNumber(f"{what} {_short(s)} is below {minimum}")
    if value > maximum:
        raise BadNumber(f"{what} {_short(s)} is above {maximum}")
    return value


def parse_number(text: str, *, what: str, minimum: float | None = None, maximum: float | None = None) -> float:
    """One finite decimal number in ASCII (``0.5``, ``.5``, ``-2``, ``1e-3``): never ``nan``,
    ``inf`` or a value that overflows to it (``1e400``), in ``[minimum, maximum]`` where given.

    :raises BadNumber: for anything else.
    """
    s = str(text).strip(" \t")
    value = float(s) if re.fullmatch(_SIGNED_DECIMAL, s) else None
    if value is None or not math.isfinite(value):
        raise BadNumber(f"{what} {text!r} is not a finite number written in digits 0-9 (e.g. 0.5, 30, 1e-3)")
    if minimum is not None and value < minimum:
        raise BadNumber(f"{what} {_short(s)} is below {minimum:g}")
    if maximum is not None and value > maximum:
        raise BadNumber(f"{what} {_short(s)} is above {maximum:g}")
    return value


def _short(text: str) -> str:
    return text if len(text) <= 30 else f"{text[:12]}...{text[-6:]} ({len(text)} characters)"


def parse_name_list(text: str, *, what: str = "--backends", example: str = "allgather_reducescatter,deepep_low_latency"
                    ) -> list[str]:
    """``"a,b"`` -> ``["a", "b"]``: names separated by commas (spaces around them dropped); an
    empty text, an empty item or a repeated name is refused (an empty --backends is a mistake,
    never "all": leave the option out for that).

    :raises BadList: naming what is wrong.
    """
    if not str(text).strip():
        raise BadList(f"{what} is empty; leave the option out for the default, or pass e.g. {example}")
    names = _items(text, what, example)
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise BadList(f"{what} {text!r} names {', '.join(repeated)} more than once")
    return names


def check_seconds(value: float, *, what: str, allow_zero: bool = False) -> float:
    """``value`` when it is a finite number of seconds above zero (or zero, if allowed) and at most
    :data:`MAX_DURATION_S`.

    :raises BadNumber: otherwise.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value < 0 or (value == 0 and not allow_zero) or value > MAX_DURATION_S:
        least = "0 or more" if allow_zero else "a positive number of"
        raise BadNumber(f"{what} must be {least} seconds (at most {MAX_DURATION_S / 86400:g} days), got {value}")
    return value


#: The largest --seed (every random generator the benchmark seeds takes it)
MAX_SEED = MAX_INT


def check_seed(value: int, *, what: str = "--seed") -> int:
    """``value`` when it is a whole number in ``[0, MAX_SEED]``.

    :raises BadNumber: otherwise.
    """
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SEED:
        raise BadNumber(f"{what} must be a whole number from 0 to {MAX_SEED}, got {value}")
    return value


# --------------------------------------------------------------------------------------
# Run references (db drop-run RUN)
# --------------------------------------------------------------------------------------

#: The longest identifier autoselect stores (a run uid, a host class, a backend): db/fields.py's names
MAX_NAME = 256
#: The most digits a run id has (SQLite's INTEGER holds 2**63 - 1, 19 digits; ids count up from 1)
_RUN_ID_DIGITS = 18


class BadRunRef(UserError):
    "A run named by something that is neither a run id nor a run uid as autoselect shows them."


class RunRef(NamedTuple):
    """A run as the user named it: ``text`` exactly, and ``id`` when the text is also a run id."""

    text: str
    id: int | None = None


def parse_run_ref(text: str, *, what: str = "RUN") -> RunRef:
    """``"12"`` -> ``RunRef("12", 12)``; ``"9f2c..."`` -> ``RunRef("9f2c...")`` (the run-reference grammar).

    :raises BadRunRef: an empty text, blanks or control characters anywhere (``" 12"`` is not
        ``12``), digits of another script, or a text longer than any uid.
    """
    s = str(text)
    if not s:
        raise BadRunRef(f"{what} is empty; pass a run id or uid as `autoselect db info` shows it")
    if len(s) > MAX_NAME:
        raise BadRunRef(f"{what} {_short(s)!r} is longer than any run id or uid ({MAX_NAME} characters)")
    if s.strip() != s or any(c.isspace() or not c.isprintable() for c in s):
        raise BadRunRef(f"{what} {s!r} holds blanks or control characters; pass the run id or uid exactly as "
                        "`autoselect db info` shows it, e.g. 12")
    if s.isdigit() and not re.fullmatch(_DIGITS, s):
        raise BadRunRef(f"{what} {s!r} is not written in digits 0-9; pass the run id as `autoselect db info` shows it")
    if re.fullmatch(_DIGITS, s) and len(s) <= _RUN_ID_DIGITS and s == str(int(s)):
        return RunRef(s, int(s))  # an id as shown: no leading zeros (``0012`` can only be a uid)
    return RunRef(s)


# --------------------------------------------------------------------------------------
# Durations
# --------------------------------------------------------------------------------------

#: Seconds per duration unit, longest first (the order the units must be written in).
DURATION_UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
_NUMBER = r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
#: compiled on first use (re's cache), not at import: ~1 ms of every command's start, and only
#: the durations of tune and fleet (--budget, --every, --jitter) need it
_DURATION = "".join(rf"(?:(?P<{u}>{_NUMBER}){u})?" for u in DURATION_UNITS)


def parse_duration(text: str, *, what: str = "duration", allow_zero: bool = False,
                   maximum: float = MAX_DURATION_S) -> float:
    """Seconds in ``90``, ``90s``, ``15m``, ``1h30m``, ``7d`` or ``2d12h`` (the duration grammar).

    :param what: the option, for the message (``--budget``).
    :param allow_zero: accept a zero duration (``--jitter 0s``).
    :raises BadDuration: for anything the grammar refuses, zero (unless allowed) or above ``maximum``.
    """
    s = str(text).strip().lower()
    example = "90s, 15m, 1h30m or 7d"
    if re.fullmatch(_NUMBER, s):
        seconds = float(s)
    else:
        m = re.fullmatch(_DURATION, s) if s else None
        if m is None or not any(m.groupdict().values()):
            raise BadDuration(f"{what} {text!r} is not a duration; write e.g. {example}")
        seconds = sum(float(n) * DURATION_UNITS[u] for u, n in m.groupdict().items() if n is not None)
    if seconds == 0 and not allow_zero:
        raise BadDuration(f"{what} {text!r} must be longer than zero; write e.g. {example}")
    if seconds > maximum:
        raise BadDuration(f"{what} {text!r} is longer than {maximum / 86400:g} days; write a shorter duration")
    return seconds


#: Wall-clock seconds a worker group's start-up (spawn to ready) and each point's adapter setup
#: may take (``--setup-timeout`` of bench, a fleet spec's ``setup_timeout_s``): FlashInfer's JIT
#: builds take minutes on a cold node.
SETUP_TIMEOUT_S = 300.0
