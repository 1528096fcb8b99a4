"""Pure parsers of Ascend tool output and node facts: text in, typed data out, no I/O."""


class ParseError(ValueError):
    """The output does not have the documented shape; the message says what was expected."""
