"""The user-facing error base, and the mistakes several commands share (one class each).

The CLI turns any :class:`UserError` into one ``Error: ...`` line on stderr and exit
status 2 (see ``autoselect/cli/__init__.py``). Anything else that escapes is a bug.

A mistake that only one area can make keeps its class in that area (``db.errors``,
``autoselect.options``, ``autoselect.workload`` ...); the classes here are raised by several.
"""


class UserError(Exception):
    "Bad input from the user: the message says what was wrong and what to do."


class UnknownBackend(UserError):
    "A backend name that autoselect cannot use here: no rule, no adapter or no measurement knows it."


class GpuArchRequired(UserError):
    "The answer depends on the GPU architecture and none is known: pass --gpu-arch."


class InvalidWorldSize(UserError):
    "A world size (EP size, dp x tp) that is not a positive integer."


class InvalidShape(UserError):
    "An MoE shape that cannot exist: a size below 1, top_k above the experts, an unknown dtype or spec."


class MissingShape(UserError):
    "Nothing to measure: no model and no complete explicit shape."


class UnknownHostClass(UserError):
    "A --host-class that is not present in the results database."
