"""The names Spark gives a query's unnamed columns, so that DuckDB's result has them too.

Spark names an output expression without an alias by its pretty SQL: ``count(*)`` is
``count(1)``, ``SUM(o.amount)`` is ``sum(amount)``, ``x + 1`` is ``(x + 1)``, a string
literal shows unquoted (``get_json_object(value, $.user)``), ``a <> b`` is
``(NOT (a = b))``, and a top-level ``CAST`` of a column keeps the column's name. DuckDB
names them otherwise (``count_star()``), so the DuckDB engine renames each such column of
the outermost SELECT in its result with the name given here (``output_names``, ``rename``).

Only expressions whose Spark name is certain get one: columns, literals, arithmetic,
comparisons, ``IN``, ``LIKE``, ``||``, ``IS [NOT] NULL``, ``CAST``, ``IF``, ``CASE`` and the functions of
``PLAIN_FUNCTIONS`` (Spark shows them as written, lower-cased, with no hidden default
argument), nested freely. Anything else (a window function, a function whose Spark name
shows defaults the query left out, e.g. ``round(x)`` as ``round(x, 0)``) keeps DuckDB's
name: name it with ``AS``.
"""

from __future__ import annotations

from sqlglot import exp

__all__ = ["PLAIN_FUNCTIONS", "STAR", "output_names", "rename", "spark_name"]

#: Functions Spark names ``name(arg, ...)``, as written (lower case).
PLAIN_FUNCTIONS = frozenset(
    {
        # aggregates
        "count", "sum", "min", "max", "avg", "mean", "first", "last", "collect_list",
        "collect_set", "stddev", "stddev_samp", "stddev_pop", "variance", "var_samp",
        "var_pop", "approx_count_distinct", "count_if", "bool_and", "bool_or",
        # scalars
        "coalesce", "nvl", "ifnull", "nullif", "upper", "lower", "ucase", "lcase", "length",
        "abs", "concat", "concat_ws", "get_json_object", "timestamp_millis",
        "timestamp_seconds", "timestamp_micros", "size", "array_contains", "greatest",
        "least", "ln", "ltrim", "rtrim", "reverse", "md5",
    }
)  # fmt: skip

_BINARY: dict[type[exp.Expression], str] = {
    exp.Add: "+",
    exp.Sub: "-",
    exp.Mul: "*",
    exp.Div: "/",
    exp.Mod: "%",
    exp.IntDiv: "div",
    exp.GT: ">",
    exp.GTE: ">=",
    exp.LT: "<",
    exp.LTE: "<=",
    exp.EQ: "=",
    exp.And: "AND",
    exp.Or: "OR",
}


#: In ``output_names``: where a ``*`` stands (its columns keep the engine's names).
STAR = "*"


def output_names(statement: exp.Expression, text: str) -> list[str | None]:
    """Spark's names of the columns of ``statement`` (parsed from ``text``; of a set
    operation, its leftmost SELECT's), one per item of its select list: None to keep the
    engine's name (an alias, a column, an expression without a certain Spark name), or
    ``STAR`` for a ``*``."""
    while isinstance(statement, exp.SetOperation):
        statement = statement.this
    if not isinstance(statement, exp.Select):
        return []
    names: list[str | None] = []
    for column in statement.expressions:
        if isinstance(column, exp.Star) or (
            isinstance(column, exp.Column) and isinstance(column.this, exp.Star)
        ):
            names.append(STAR)
        elif isinstance(column, exp.Alias | exp.Column):
            names.append(None)
        else:
            names.append(spark_name(column, text, top=True))
    return names


def rename(columns: list[str], names: list[str | None]) -> list[str]:
    """``columns`` (the engine's result) with Spark's ``names`` (``output_names``) where
    they are known: the items before the first ``*`` from the left, and, with one ``*``,
    those after it from the right. The query itself is left as it was: an alias in it
    could change what an ORDER BY or a GROUP BY refers to."""
    out = list(columns)
    stars = names.count(STAR)
    head = names[: names.index(STAR)] if stars else names
    if not stars and len(names) != len(columns):
        return out
    for i, name in enumerate(head):
        if name is not None and i < len(out):
            out[i] = name
    if stars == 1:
        tail = names[names.index(STAR) + 1 :]
        for i, name in enumerate(tail, start=len(out) - len(tail)):
            if name is not None and 0 <= i < len(out):
                out[i] = name
    return out


def spark_name(e: exp.Expression, text: str, top: bool = False) -> str | None:
    """Spark's name of expression ``e`` of query ``text`` (``top``: a whole output column),
    or None when it is not certain."""
    if isinstance(e, exp.Paren):
        return spark_name(e.this, text)
    if isinstance(e, exp.Column):
        return None if isinstance(e.this, exp.Star) else e.name
    if isinstance(e, exp.Literal):
        return str(e.this)
    if isinstance(e, exp.Null):
        return "NULL"
    if isinstance(e, exp.Boolean):
        return "true" if e.this else "false"
    if isinstance(e, exp.Neg):
        if isinstance(e.this, exp.Literal) and e.this.is_number:  # Spark folds -1
            return f"-{e.this.this}"
        return _wrap("(- {})", e.this, text)
    if isinstance(e, exp.Cast):
        if top and isinstance(e.this, exp.Column):  # Spark keeps the column's name
            return spark_name(e.this, text)
        inner = spark_name(e.this, text)
        kind = e.to.sql(dialect="spark").replace(", ", ",")
        return None if inner is None else f"CAST({inner} AS {kind})"
    return _operator(e, text) or _function(e, text)


def _wrap(form: str, e: exp.Expression, text: str) -> str | None:
    inner = spark_name(e, text)
    return None if inner is None else form.format(inner)


def _operator(e: exp.Expression, text: str) -> str | None:
    """Operators, ``IN``, ``LIKE``, ``IS``, ``NOT``, ``IF`` and ``CASE``, parenthesized as
    Spark does."""
    if type(e) in _BINARY or isinstance(e, exp.NEQ):
        a, b = spark_name(e.this, text), spark_name(e.expression, text)
        if a is None or b is None:
            return None
        if isinstance(e, exp.NEQ):
            return f"(NOT ({a} = {b}))"
        return f"({a} {_BINARY[type(e)]} {b})"
    if isinstance(e, exp.Like):
        a, b = spark_name(e.this, text), spark_name(e.expression, text)
        return None if a is None or b is None else f"{a} LIKE {b}"
    if isinstance(e, exp.DPipe):  # Spark's || is concat
        a, b = spark_name(e.this, text), spark_name(e.expression, text)
        return None if a is None or b is None else f"concat({a}, {b})"
    if isinstance(e, exp.In) and not e.args.get("query"):
        listed = [spark_name(x, text) for x in [e.this, *e.expressions]]
        if None in listed:
            return None
        return f"({listed[0]} IN ({', '.join(listed[1:])}))"  # type: ignore[arg-type]
    if isinstance(e, exp.Is) and isinstance(e.expression, exp.Null):
        return _wrap("({} IS NULL)", e.this, text)
    if isinstance(e, exp.Not):
        if isinstance(e.this, exp.Is) and isinstance(e.this.expression, exp.Null):
            return _wrap("({} IS NOT NULL)", e.this.this, text)
        return _wrap("(NOT {})", e.this, text)
    if isinstance(e, exp.If):
        parts = [spark_name(e.this, text), spark_name(e.args["true"], text)]
        parts.append(spark_name(e.args["false"], text) if e.args.get("false") else "NULL")
        return None if None in parts else f"(IF({', '.join(parts)}))"  # type: ignore[arg-type]
    if isinstance(e, exp.Case):
        subject = None if e.this is None else spark_name(e.this, text)
        if e.this is not None and subject is None:
            return None
        words = ["CASE"]
        for branch in e.args.get("ifs") or []:
            when, then = spark_name(branch.this, text), spark_name(branch.args["true"], text)
            if when is None or then is None:
                return None
            if subject is not None:  # Spark writes CASE x WHEN v as CASE WHEN (x = v)
                when = f"({subject} = {when})"
            words += ["WHEN", when, "THEN", then]
        if e.args.get("default") is not None:
            default = spark_name(e.args["default"], text)
            if default is None:
                return None
            words += ["ELSE", default]
        return " ".join([*words, "END"])
    return None


def _function(e: exp.Expression, text: str) -> str | None:
    """A function of ``PLAIN_FUNCTIONS`` as written: its name from the query's text."""
    if not isinstance(e, exp.Func) or "start" not in e.meta or "end" not in e.meta:
        return None
    written = text[e.meta["start"] : e.meta["end"] + 1].lower()
    if written not in PLAIN_FUNCTIONS:
        return None
    if isinstance(e, exp.Count) and isinstance(e.this, exp.Star):
        return "count(1)"
    args: list[str] = []
    for key in e.arg_types:
        value = e.args.get(key)
        for arg in value if isinstance(value, list) else [value]:
            if not isinstance(arg, exp.Expression):
                continue  # a flag, or Anonymous' own name
            if isinstance(arg, exp.Distinct):
                listed = [spark_name(a, text) for a in arg.expressions]
                if None in listed:
                    return None
                args.append("DISTINCT " + ", ".join(listed))  # type: ignore[arg-type]
                continue
            if isinstance(arg, exp.JSONPath):  # get_json_object's path: a string literal
                args.append(arg.sql(dialect="spark").strip("'"))
                continue
            name = spark_name(arg, text)
            if name is None:
                return None
            args.append(name)
    return f"{written}({', '.join(args)})"
