"""The user-facing error base: every mistake a user can make is a subclass.

The CLI turns any :class:`UserError` into one ``Error: ...`` line on stderr and exit
status 2 (see ``autoselect/cli/__init__.py``). Anything else that escapes is a bug.
"""


class UserError(Exception):
    "Bad input from the user: the message says what was wrong and what to do."
