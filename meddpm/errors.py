"""The one exception type for mistakes a user can fix."""


class UserError(Exception):
    """A problem with the user's input or machine, reported as one line with no traceback.

    The message names the problem and the fix; command-line entry points and the pytest
    plugin print it alone and exit with status 2.
    """
