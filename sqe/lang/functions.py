"""The catalogue of SQE functions: names, arity and kind (transform or aggregation).

This is the single list of what an expression may call.  Names are matched
case-insensitively, as SQE's ``FunctionExpression.makeFunction`` does, and
the canonical name is SQE's own (lower-case words or symbols), which is also
what output field names use (``sum(Embeds)``).  ``aliases`` add spelled-out
names (``Equals`` for ``=``, the name of SQE's Java class).  How each
function becomes a Spark Column is the compiler's business, not this
module's; the catalogue only lets a topology be validated before Spark
starts.  What both compilers (Spark's and the post-filter's) must share about
a function's meaning lives here too: :func:`whole_match`, SQE's ``RLike``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["FunctionSpec", "FUNCTIONS", "WHOLE_MATCH", "find_function", "known_function_names",
           "whole_match"]


@dataclass(frozen=True, slots=True)
class FunctionSpec:
    """One SQE function: canonical name, argument count bounds, kind and a one-line doc."""

    name: str
    min_args: int
    max_args: int | None
    doc: str
    aggregate: bool = False
    aliases: tuple[str, ...] = ()


_SPECS = [
    # arithmetic (Clojure numeric promotion in SQE: integers stay integral, floats win)
    FunctionSpec("+", 2, 2, "Sum of two numbers.", aliases=("Plus",)),
    FunctionSpec("-", 2, 2, "First number minus the second.", aliases=("Minus", "Subtract")),
    FunctionSpec("*", 2, 2, "Product of two numbers.", aliases=("Multiply",)),
    FunctionSpec("/", 2, 2, "First number divided by the second.", aliases=("Divide",)),
    FunctionSpec("%", 2, 2, "Remainder of the first number by the second.",
                 aliases=("Mod", "Modulus")),
    # logic
    FunctionSpec("and", 1, None, "True when every argument is true."),
    FunctionSpec("or", 1, None, "True when any argument is true."),
    FunctionSpec("xor", 1, None, "True when an odd number of arguments are true."),
    FunctionSpec("not", 1, 1, "Negation of a boolean."),
    # comparisons
    FunctionSpec("=", 2, 2, "Equality of two values (numbers compare across types; "
                 "a number never equals a string).",
                 aliases=("Equals",)),
    FunctionSpec("!=", 2, 2, "Inequality of two numbers.", aliases=("NotEquals",)),
    FunctionSpec(">", 2, 2, "First number greater than the second.", aliases=("GreaterThan",)),
    FunctionSpec(">=", 2, 2, "First number greater than or equal to the second.",
                 aliases=("GreaterThanEqual",)),
    FunctionSpec("<", 2, 2, "First number less than the second.", aliases=("LessThan",)),
    FunctionSpec("<=", 2, 2, "First number less than or equal to the second.",
                 aliases=("LessThanEqual",)),
    FunctionSpec("in", 2, None, "First value equals one of the others."),
    FunctionSpec("rlike", 2, 2, "The whole first value matches the regular expression in "
                 "the second (Java's Matcher.matches)."),
    # transforms
    FunctionSpec("if", 3, 3, "Second argument when the first is true, else the third."),
    FunctionSpec("parsedate", 2, 2, "Parse a date string with a Java date pattern (UTC)."),
    FunctionSpec("formatdate", 2, 2, "Format a date with a Java date pattern (UTC)."),
    FunctionSpec("rounddate", 3, 3,
                 "Floor a date to a multiple of amount x unit (second, minute, hour, day)."),
    FunctionSpec("gettime", 1, 2,
                 "Epoch milliseconds of a date, or of a string parsed with a pattern."),
    FunctionSpec("hash", 1, 2, "64-bit MurmurHash2 of a value, optionally naming "
                 "the algorithm first (murmur2)."),
    FunctionSpec("getmapvalue", 2, 2, "The value of a key in a map field."),
    FunctionSpec("expandkeys", 1, 1, "One row per key of a map field, keys ascending."),
    FunctionSpec("expandvalues", 1, 1, "One row per value of a map field, by ascending key."),
    # aggregations (only the first argument is aggregated; the second is a sketch size)
    FunctionSpec("sum", 1, 1, "Sum of a numeric field per group.", aggregate=True),
    FunctionSpec("max", 1, 1, "Largest value per group.", aggregate=True),
    FunctionSpec("createhll", 1, 2, "HyperLogLog sketch of a field per group "
                 "(optional log2m constant, default 11).", aggregate=True),
    FunctionSpec("createhllp", 1, 2, "HyperLogLog++ sketch of a field per group "
                 "(optional precision constant, default 11).", aggregate=True),
]

#: Every function by canonical name.
FUNCTIONS: dict[str, FunctionSpec] = {s.name: s for s in _SPECS}

_BY_LOWER: dict[str, FunctionSpec] = {}
for _spec in _SPECS:
    for _name in (_spec.name, *_spec.aliases):
        _BY_LOWER[_name.lower()] = _spec


def find_function(name: str) -> FunctionSpec | None:
    """The function called ``name`` (any case, or an alias), or ``None``."""
    return _BY_LOWER.get(name.lower())


def known_function_names() -> list[str]:
    """Canonical names of every function, in catalogue order."""
    return [s.name for s in _SPECS]


#: What a pattern is wrapped in so that a search (Spark's ``regexp_like``, Arrow's
#: ``match_substring_regex``) matches only the whole text, as SQE's ``RLike`` does (Java's
#: ``Matcher.matches()``): ``\A`` and ``\z`` are the very start and end of the text (``$``
#: would also match before a final line break), the group keeps ``a|b`` whole.
WHOLE_MATCH = ("\\A(?:", ")\\z")


def whole_match(pattern: str) -> str:
    """``pattern`` anchored to match the whole text (a ``\\Q`` quote left open is closed
    first, or it would swallow the closing anchor)."""
    i, open_quote = 0, False
    while i < len(pattern):
        if pattern.startswith("\\Q", i):
            end = pattern.find("\\E", i + 2)
            if end < 0:
                open_quote = True
                break
            i = end + 2
        else:
            i += 2 if pattern[i] == "\\" else 1
    return WHOLE_MATCH[0] + pattern + ("\\E" if open_quote else "") + WHOLE_MATCH[1]
