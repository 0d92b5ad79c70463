"""Where option values come from and which one wins.

Precedence, lowest to highest:

1. the registry's defaults,
2. ``--config`` YAML files, in order (their ``SQE:`` map; ``Spark:`` goes to the SparkSession),
3. ``Set`` commands of the topology, in file order, for the commands after them,
4. a command's own ``options``,
5. ``--conf key=value`` on the command line,
6. Spark conf ``spark.jw.sqe.*`` (so ``spark-submit --conf`` works).

:class:`Settings` is the one immutable, validated result: a read-only
mapping from every declared key to its effective value, which also knows
where each value came from (:meth:`Settings.origin`).  Keys outside
``jw.sqe.`` are kept aside in :attr:`Settings.foreign` (SQE allowed any
``Set`` key) and reported, never silently applied.  Every value may name
environment variables, ``${NAME}`` or ``${NAME:-default}``, expanded when
it is read (:func:`sqe.secrets.expand_env`), so files need not hold secrets.
:meth:`Settings.overlay` refuses a layer at its first bad key; :meth:`Settings.overlay_each`
(what ``sqe validate`` uses) checks every key, applies the good ones and remembers the refused
ones, whose reading then raises :class:`~sqe.errors.RefusedOption`.

Example::

    >>> s = Settings.defaults().overlay({"jw.sqe.spout.kafka.filterReplays": "true"}, "--conf")
    >>> s["jw.sqe.spout.kafka.filterReplays"], s.origin("jw.sqe.spout.kafka.filterReplays")
    (True, '--conf')
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeVar

from sqe.config.options import PREFIX, coerce, render
from sqe.config.registry import REGISTRY, lookup, suggest
from sqe.config.spark_settings import closest_spark_setting, is_spark_setting, unknown_spark_setting
from sqe.errors import OptionError, RefusedOption
from sqe.lang.documents import SyntaxProblem, load_yaml, read_text
from sqe.secrets import MASK, expand_env, mask_value

__all__ = ["Settings", "ConfigFile", "load_config", "parse_conf_pairs", "spark_conf_options",
           "unless_refused"]

SPARK_PREFIX = "spark." + PREFIX
T = TypeVar("T")


@dataclass(frozen=True)
class Settings(Mapping[str, Any]):
    """Effective values of every declared option, with the origin of each."""

    _values: Mapping[str, tuple[Any, str]] = field(default_factory=dict)
    foreign: Mapping[str, tuple[Any, str]] = field(default_factory=dict)
    refused: frozenset[str] = frozenset()  # declared keys whose value was refused: no value

    @classmethod
    def defaults(cls) -> Settings:
        """Nothing set: every key at its declared default."""
        return cls(MappingProxyType({}), MappingProxyType({}))

    def overlay(self, values: Mapping[str, Any] | None, origin: str) -> Settings:
        """A new Settings with ``values`` (validated, from ``origin``) on top of this one; the
        first key refused raises :class:`~sqe.errors.OptionError`."""
        settings, problems = self.overlay_each(values, origin)
        if problems:
            raise OptionError(problems[0])
        return settings

    def overlay_each(self, values: Mapping[str, Any] | None, origin: str
                     ) -> tuple[Settings, list[str]]:
        """Every key of ``values`` checked: a new Settings with the good ones on top of this
        one, and one message per key refused.  A refused key of a declared option has no value
        in the result (reading it raises :class:`~sqe.errors.RefusedOption`) until a layer
        above gives it one; an unknown key is only its message."""
        if not values:
            return self, []
        if not isinstance(values, Mapping):
            return self, [f"{origin}: options must be a map of key: value, "
                          f"got {type(values).__name__}"]
        merged = dict(self._values)
        foreign = dict(self.foreign)
        refused = set(self.refused)
        problems = []
        for key, raw in values.items():
            if not isinstance(key, str):
                problems.append(f"{origin}: option key {key!r} is not a string")
                continue
            if not key.startswith(PREFIX):
                foreign[key] = (raw, origin)
                continue
            merged.pop(key, None)  # the keys stay in the order their values were set
            try:
                option = lookup(key, origin)
                merged[key] = (coerce(option, expand_env(raw, f"{origin}: {key}"), origin), origin)
                refused.discard(key)
            except OptionError as exc:
                problems.append(str(exc))
                refused |= {key} & REGISTRY.keys()
        return Settings(MappingProxyType(merged), MappingProxyType(foreign),
                        frozenset(refused)), problems

    def __reduce__(self) -> tuple[Any, ...]:
        # Settings travel to the executors inside a source's config: pickle plain dicts.  No
        # refused key is among them: settings with one never pass validation.
        return _restore, (dict(self._values), dict(self.foreign))

    def __getitem__(self, key: str) -> Any:
        if key in self._values:
            return self._values[key][0]
        if key in self.refused:
            raise RefusedOption(key)
        return REGISTRY[key].default

    def __iter__(self) -> Iterator[str]:
        return iter(REGISTRY)

    def __len__(self) -> int:
        return len(REGISTRY)

    def origin(self, key: str) -> str:
        """Where the effective value of ``key`` came from (``"default"`` when unset)."""
        if key in self._values:
            return self._values[key][1]
        REGISTRY[key]
        return "default"

    def overridden(self, key: str, by: str) -> bool:
        """Whether ``key``'s value was given at a lower precedence than ``by``'s (an earlier
        layer: a config file under ``--conf``); never when both came from one place."""
        if key not in self._values or by not in self._values:
            return False
        if self.origin(key) == self.origin(by):
            return False
        order = list(self._values)
        return order.index(key) < order.index(by)

    def properties(self, prefix: str) -> dict[str, str]:
        """The client properties given as ``<prefix><property>`` keys, by property name."""
        return {k[len(prefix):]: v for k, (v, _) in self._values.items() if k.startswith(prefix)}

    def shown(self, key: str) -> Any:
        """The value of ``key`` as it may be printed: secrets masked, URL passwords hidden."""
        option = lookup(key, "settings")
        value = self[key]
        if value is None:
            return None
        return MASK if option.secret else mask_value(key, value)

    def explicit(self) -> dict[str, Any]:
        """Only the keys given somewhere, with their values."""
        return {k: v for k, (v, _) in self._values.items()}

    def text(self, key: str) -> str:
        """The value of ``key`` as the string that :meth:`overlay` reads back as the same."""
        return render(lookup(key, "settings"), self[key])

    def warnings(self) -> list[str]:
        """Options that were given but have no effect on Spark, and foreign keys."""
        out = []
        for key, (_, origin) in self._values.items():
            reason = REGISTRY[key].ignored if key in REGISTRY else None
            if reason:
                out.append(f"{origin}: {key} has no effect on Spark ({reason})")
        for key, (_, origin) in self.foreign.items():
            out.append(_foreign_warning(key, origin))
        return out


def unless_refused(read: Callable[[], T], otherwise: T) -> T:
    """``read()`` (a check's problems, a stream's fields), or ``otherwise`` when it reads an
    option whose value was refused: nothing can be said of a value that is not known, and the
    refusal is reported already (:meth:`Settings.overlay_each`)."""
    try:
        return read()
    except RefusedOption:
        return otherwise


def _foreign_warning(key: str, origin: str) -> str:
    """What a key outside ``jw.sqe.*`` given among options is taken for, and what it may be."""
    if key.startswith("spark."):
        hint = None if is_spark_setting(key) else closest_spark_setting(key)
        return (f"{origin}: {key} is a Spark setting, which SQE takes only from a config file's "
                "Spark: section (or spark-submit --conf), so it is ignored here"
                + (f"; Spark does not know it either: did you mean {hint}?" if hint else ""))
    hint = suggest(key)
    return (f"{origin}: {key} is not a jw.sqe.* option and is ignored"
            + (f"; did you mean {hint}?" if hint else ""))


def _restore(values: dict[str, tuple[Any, str]], foreign: dict[str, tuple[Any, str]]
             ) -> Settings:
    return Settings(MappingProxyType(values), MappingProxyType(foreign))


@dataclass(frozen=True)
class ConfigFile:
    """One ``--config`` YAML file: its ``SQE:`` options and ``Spark:`` conf, and the warnings
    about its Spark settings that Spark does not know."""

    path: str
    sqe: Mapping[str, Any]
    spark: Mapping[str, str]
    warnings: tuple[str, ...] = ()


_CONFIG_SECTIONS = {"SQE", "Spark", "Storm"}


def load_config(path: str | Path) -> ConfigFile:
    """Load a config file in SQE's sample-conf.yaml shape (``SQE:`` and ``Spark:`` maps).

    SQE's ``Storm:`` section is accepted and ignored.  Errors name the file.
    """
    name = str(path)
    try:
        data = load_yaml(read_text(Path(path)))
    except OSError as exc:
        raise OptionError(f"{name}: cannot read config file ({exc.strerror})") from None
    except SyntaxProblem as exc:
        raise OptionError(exc.located(name)) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise OptionError(f"{name}: a config file must be a map with SQE: and Spark: sections")
    unknown = set(data) - _CONFIG_SECTIONS
    if unknown:
        raise OptionError(
            f"{name}: unknown section(s) {', '.join(sorted(map(str, unknown)))}; "
            "expected SQE: (jw.sqe.* options) and Spark: (Spark conf)"
        )
    sqe, spark = ({} if data.get(section) is None else data[section] for section in ("SQE", "Spark"))
    for section, value in (("SQE", sqe), ("Spark", spark)):
        if not isinstance(value, dict):
            raise OptionError(f"{name}: section {section} must be a map of key: value")
    Settings.defaults().overlay(sqe, f"{name} (SQE)")  # validate early, naming the file
    origin = f"{name} (Spark)"
    conf = {key: _spark_value(key, expand_env(value, f"{origin}: {key}"), origin)
            for key, value in spark.items()}
    Settings.defaults().overlay(spark_conf_options(conf), origin)  # spark.jw.sqe.* are options
    warnings = (unknown_spark_setting(key, origin) for key in conf)
    return ConfigFile(name, MappingProxyType(dict(sqe)), MappingProxyType(conf),
                      tuple(w for w in warnings if w))


def _spark_value(key: Any, value: Any, origin: str) -> str:
    """A ``Spark:`` setting's value as Spark conf takes it (a string); a key that is not a
    string, and a value that is not a string, number or boolean, are errors."""
    if not isinstance(key, str):
        raise OptionError(f"{origin}: the key {key!r} is not a string; Spark settings are "
                          "named like spark.sql.shuffle.partitions")
    if value is None:
        raise OptionError(f"{origin}: {key}: null is not a value; expected a string, number or "
                          "boolean; leave the key out for Spark's default")
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int, float)):
        return str(value)
    raise OptionError(f"{origin}: {key} = {value!r}: expected a string, number or boolean "
                      "(Spark settings are single values)")


def parse_conf_pairs(pairs: Iterable[str]) -> dict[str, str]:
    """Parse ``--conf key=value`` arguments; a pair without ``=`` is an error naming it."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise OptionError(f"--conf {pair!r}: expected key=value")
        out[key.strip()] = value
    return out


def spark_conf_options(conf: Iterable[tuple[str, str]] | Mapping[str, str]) -> dict[str, str]:
    """The ``jw.sqe.*`` options carried in Spark conf as ``spark.jw.sqe.*``."""
    items = conf.items() if isinstance(conf, Mapping) else conf
    return {k[len("spark."):]: v for k, v in items if k.startswith(SPARK_PREFIX)}
