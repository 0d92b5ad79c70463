"""YAML and JSON documents: every way a text fails to be one is a SyntaxProblem with a 1-based
line and column, never a bare Python exception."""

from __future__ import annotations

import pytest

from sqe.lang.documents import MAX_DEPTH, SyntaxProblem, load_json, load_yaml


@pytest.mark.parametrize(
    "text,located",
    [
        ("a: !!int 0xZZ", "1:4: not valid YAML: '0xZZ' is not an integer (invalid literal for "
                          "int() with base 16: 'ZZ')"),
        ("a: !!bool maybe", "1:4: not valid YAML: 'maybe' is not a boolean (true or false)"),
        ("a: !!timestamp x", "1:4: not valid YAML: 'x' is not a date (YYYY-MM-DD) or a timestamp"),
        ("? [a]\n: 1", "1:3: not valid YAML: found unhashable key (while constructing a mapping "
                       "at line 1, column 1)"),
        ("a: *x", "1:4: not valid YAML: found undefined alias 'x'"),
        ("a: 1\n---\nb\n", "2:1: not valid YAML: expected a single document in the stream at "
                           "line 1, column 1, but found another document"),
        ("a: !!python/name:os.system", "1:4: not valid YAML: could not determine a constructor "
                                       "for the tag 'tag:yaml.org,2002:python/name:os.system'"),
        ("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1),
         f"1:{MAX_DEPTH + 1}: not valid YAML: maps and lists nest deeper than {MAX_DEPTH} levels"),
    ],
)
def test_yaml_problems_are_located(text, located):
    with pytest.raises(SyntaxProblem) as info:
        load_yaml(text)
    assert str(info.value) == located


def test_nesting_up_to_the_limit_is_read():
    assert load_yaml("[" * MAX_DEPTH + "]" * MAX_DEPTH) is not None
    assert load_json("[" * MAX_DEPTH + "]" * MAX_DEPTH) is not None


@pytest.mark.parametrize(
    "text,located",
    [
        ('{"a": [1,}', "1:10: not valid JSON: expecting value"),
        ("[" * 5000 + "]" * 5000,
         f"1:{MAX_DEPTH + 1}: not valid JSON: maps and lists nest deeper than {MAX_DEPTH} levels"),
        ("1" * 5000, "1:1: not valid JSON: Exceeds the limit (4300 digits) for integer string "
                     "conversion: value has 5000 digits; use sys.set_int_max_str_digits() to "
                     "increase the limit"),
    ],
)
def test_json_problems_are_located(text, located):
    with pytest.raises(SyntaxProblem) as info:
        load_json(text)
    assert str(info.value) == located


def test_brackets_inside_json_strings_do_not_nest():
    text = '["' + "[" * (MAX_DEPTH + 5) + '\\"", "{\\\\"]'
    assert load_json(text) == ["[" * (MAX_DEPTH + 5) + '"', "{\\"]
