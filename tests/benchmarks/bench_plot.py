"""The plot of records/s per operator, lakestate against Spark Structured Streaming (SSS),
from the results JSON files in ``tests/benchmarks/results`` (issue 28, item 6).

Run from the repository root (nothing is measured: it reads what the benchmarks wrote)::

    .venv/bin/python tests/benchmarks/bench_plot.py      # -> docs/benchmarks-throughput.png

Per operator (1M-record backlogs from empty state, fresh processes, ``local[2]`` for SSS),
three bars: lakestate and SSS as the same benchmark run measured them side by side (file and
date in the label), and lakestate's newest plain run in process (``bench_profiles.py``'s
timed runs, ``profiles.json``; for the count also ``bench_threshold.py``'s 1M run: of the
two, the one measured at the lower load),
which SSS was not rerun beside (its runs take minutes each). The dashed line is the
stateless ceiling: ``bench_threshold.py``'s delta-rs read -> write pass of 1M records. The
y axis is logarithmic; the figures, dates and load averages are printed as a table too,
with each operator's newest lakestate records/s over the ceiling's (target: at least 0.5).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
RESULTS = HERE / "results"
DEFAULT_PNG = ROOT / "docs" / "benchmarks-throughput.png"
#: operator -> (results file, its date when the file records none, the newest timed
#: lakestate case in profiles.json)
PAIRED = {
    "count": ("scheduled.json", "2026-11-29", "count"),
    "dedup": ("scheduled.json", "2026-11-29", "dedup"),
    "windowed final": ("windows.json", "2026-11-24", "windowed"),
    "temporal join": ("versioned.json", "2026-11-24", "temporal_join"),
    "stream join": ("stream_join.json", "2026-11-28", None),
}
#: a "newest" plain run counts only if measured on a quiet machine (load before it below
#: this): the shared machine's loaded runs would stand beside quiet paired ones
QUIET_LOAD = 4.0


def _load(name: str) -> dict[str, Any]:
    return json.loads((RESULTS / name).read_text())


def _rate(run: dict[str, Any], records: int) -> int:
    return run.get("records_per_s") or round(records / run["wall_s"])


def _load_avg(run: dict[str, Any]) -> str:
    before, after = run.get("load_before"), run.get("load_after")
    first = before[0] if isinstance(before, list) else before
    last = after[0] if isinstance(after, list) else after
    return f"{first}-{last}"


def paired(operator: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(lakestate, SSS) of the same recorded run: records/s and the load."""
    name, _, _ = PAIRED[operator]
    d = _load(name)
    if name.startswith("scheduled"):
        case = d["cases"]["c"]["demo" if operator == "count" else "dedup"]
        ls, ss = case["lakestate"], case["sss"]
        n = case["records"]
    elif name == "windows.json":
        t = d["cases"]["throughput"]
        ls, ss, n = t["lakestate"], t["sss"], t["lakestate"]["records"]
    elif name == "versioned.json":
        ls, ss, n = d["lakestate"]["run"], d["sss"]["run"], d["input"]["orders"]
    else:
        ls, ss, n = d["lakestate"], d["sss"], 2 * d["input"]["records_per_side"]
    return (
        {"records_per_s": _rate(ls, n), "load": _load_avg(ls)},
        {"records_per_s": _rate(ss, n), "load": _load_avg(ss)},
    )


def newest(operator: str) -> dict[str, Any] | None:
    """lakestate's newest plain run of the operator in process: profiles.json's timed run,
    or for the count also threshold.json's 1M run; of two, the one at the lower load."""
    case = PAIRED[operator][2]
    found = []
    if case and (RESULTS / "profiles.json").exists():
        d = _load("profiles.json")
        t = d["cases"].get(case, {}).get("timed")
        if t:
            found.append((t, d["started"][:10]))
    if operator == "count" and (RESULTS / "threshold.json").exists():
        d = _load("threshold.json")
        for row in d["rows"]:
            if row["records"] == 1_000_000 and "inprocess" in row:
                found.append((row["inprocess"], d["started"][:10]))
    found = [f for f in found if _first(f[0]["load_before"]) < QUIET_LOAD]
    if not found:
        return None
    run, date = min(found, key=lambda f: _first(f[0]["load_before"]))
    return {"records_per_s": run["records_per_s"], "load": _load_avg(run), "date": date}


def _first(load: Any) -> float:
    return load[0] if isinstance(load, list) else load


def _date(name: str, default: str) -> str:
    started = _load(name).get("started")
    return started[:10] if started else default


def ceiling() -> dict[str, Any] | None:
    """The delta-rs read -> write pass of 1M records: ceiling.json (``bench_threshold.py
    --sizes 1000000 --sides inprocess,ceiling --json results/ceiling.json``, a quiet rerun
    that leaves the sweep's threshold.json alone), else threshold.json's."""
    name = "ceiling.json" if (RESULTS / "ceiling.json").exists() else "threshold.json"
    if not (RESULTS / name).exists():
        return None
    d = _load(name)
    for row in d["rows"]:
        if row["records"] == 1_000_000 and "ceiling" in row:
            r = row["ceiling"]
            return {
                "records_per_s": r["records_per_s"],
                "load": _load_avg(r),
                "date": d["started"][:10],
            }
    return None


def figures() -> list[dict[str, Any]]:
    rows = []
    for operator, (name, default, _) in PAIRED.items():
        ls, ss = paired(operator)
        date = _date(name, default)
        rows.append(
            {"operator": operator, "file": name, "date": date, "lakestate": ls, "sss": ss,
             "newest": newest(operator)}
        )  # fmt: skip
    return rows


def plot(rows: list[dict[str, Any]], top: dict[str, Any] | None, png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")  # no display: a file
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 5.2), dpi=110)
    width = 0.27
    for i, row in enumerate(rows):
        bars = [(i - width, row["lakestate"], "tab:blue"), (i, row["sss"], "tab:orange")]
        if row["newest"]:
            bars.append((i + width, row["newest"], "tab:green"))
        for x, fig_, color in bars:
            value = fig_["records_per_s"]
            ax.bar(x, value, width, color=color)
            load = fig_["load"].split("-")[0]
            text = f"{value / 1000:.0f}k\nload {load}"
            ax.text(x, value * 1.08, text, ha="center", fontsize=6)
    ax.bar(0, 0, 0, color="tab:blue", label="lakestate, same run as SSS")
    ax.bar(0, 0, 0, color="tab:orange", label="Structured Streaming (local[2], RocksDB)")
    ax.bar(0, 0, 0, color="tab:green", label="lakestate, newest run in process (no SSS beside)")
    if top:
        ax.axhline(top["records_per_s"], color="grey", linestyle="--", linewidth=1)
        ax.text(
            -0.5, top["records_per_s"] * 1.15,
            f"stateless ceiling: delta-rs read -> write, {top['records_per_s'] / 1000:.0f}k/s "
            f"({top['date']})", ha="left", fontsize=8, color="grey",
        )  # fmt: skip
    ax.set_yscale("log")
    ax.set_ylabel("records/s (log scale)")
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([f"{r['operator']}\n{r['file']}, {r['date']}" for r in rows], fontsize=8)
    ax.set_title("1M-record backlogs from empty state, 2-core shared machine (load: 1-min average)")
    ax.set_ylim(top=(top["records_per_s"] if top else 1e5) * 4)
    ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    fig.savefig(png)


def report(rows: list[dict[str, Any]], top: dict[str, Any] | None) -> None:
    print("| operator | file (date) | lakestate rec/s (load) | SSS rec/s (load) | ratio | "
          "lakestate newest rec/s (date, load) | newest / SSS | newest / ceiling |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        ls, ss, nw = r["lakestate"], r["sss"], r["newest"]
        newest_text = f"{nw['records_per_s']:,} ({nw['date']}, {nw['load']})" if nw else ""
        newest_ratio = f"{nw['records_per_s'] / ss['records_per_s']:.2f}" if nw else ""
        best = nw or ls
        of_top = f"{best['records_per_s'] / top['records_per_s']:.3f}" if top else ""
        print(
            f"| {r['operator']} | {r['file']} ({r['date']}) | {ls['records_per_s']:,} "
            f"({ls['load']}) | {ss['records_per_s']:,} ({ss['load']}) | "
            f"{ls['records_per_s'] / ss['records_per_s']:.2f} | {newest_text} | {newest_ratio} | "
            f"{of_top} |"
        )
    if top:
        print(
            f"\nstateless ceiling: {top['records_per_s']:,} records/s ({top['date']}, load {top['load']})"
        )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    png = Path(argv[0]) if argv else DEFAULT_PNG
    rows, top = figures(), ceiling()
    report(rows, top)
    plot(rows, top, png)
    print(f"\nwrote {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
