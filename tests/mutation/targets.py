"""What ``tests/mutation/run.py`` mutates, with which tests, and the hand-written mutants.

A *target* is a family of guarantee-carrying code: the functions (qualified names, shell-style
patterns) mutated in each file, and the test command that must catch a mutant there. Test
commands are the fast files that defend the code (``-x``: the first failure ends the run).

A *hand mutant* is a one-line change a mutation tool cannot make or past reviews found no test
for: the SQL inside strings, and specific plausible bugs. ``old`` must occur exactly once in
``file``. ``EQUIVALENT`` lists surviving tool mutants that cannot change behaviour, keyed by
their change (``file: removed => added``), each with why.
"""

from __future__ import annotations

from dataclasses import dataclass, field

PYTEST = 'python -m pytest -x -q -p no:cacheprovider -m "not slow"'


@dataclass(frozen=True)
class Target:
    name: str
    functions: dict[str, list[str]]
    tests: tuple[str, ...]

    @property
    def command(self) -> str:
        return f"{PYTEST} {' '.join(self.tests)}"


@dataclass(frozen=True)
class HandMutant:
    target: str
    name: str
    file: str
    old: str
    new: str
    command: str | None = None     # default: the target's
    equivalent: str | None = None  # why it cannot change behaviour, if it is known to survive
    kind: str = field(default="sql")


STD = "plugins/anonflow_std"

TARGETS = [
    Target(
        "privacy-sql",
        {
            f"{STD}/privacy/kanonymity.py": ["KAnonymity.compute"],
            f"{STD}/common/counts.py": ["grouping", "class_counts_sql", "grouped_part", "claimed", "published_part",
                                        "table_counts_sql", "pair_counts_sql", "pair_consistency_sql",
                                        "flagged_counts_sql"],
            f"{STD}/privacy/distinct_diversity.py": ["_diversity_report", "LDiversity.compute",
                                                     "PSensitiveKAnonymity.compute"],
            f"{STD}/utility/class_metrics.py": ["class_sizes_sql"],
            f"{STD}/privacy/alphak.py": ["alpha_report", "_AlphaCheck.*", "AlphaKAnonymity.compute",
                                        "AlphaIKAnonymity.compute"],
            f"{STD}/publishing/lossy_join.py": ["split_tables", "k_figures"],
        },
        ("tests/plugins/utility/test_metrics_by_hand.py", "tests/plugins/privacy/test_missing_values.py",
         "tests/plugins/privacy/test_boundaries.py", "tests/plugins/clustering/test_lclustering.py",
         "tests/plugins/clustering/test_gca.py"),
    ),
    Target(
        "partition-holds",
        {
            f"{STD}/privacy/kanonymity.py": ["KAnonymity.partition_holds"],
            f"{STD}/privacy/distinct_diversity.py": ["*.partition_holds"],
            f"{STD}/privacy/alphak.py": ["*.partition_holds"],
            f"{STD}/common/columns.py": ["real_counts", "real_distinct"],
        },
        ("tests/plugins/privacy/test_boundaries.py", "tests/plugins/generalization/test_lattice.py",
         "tests/plugins/generalization/test_lattice_oracle.py"),
    ),
    Target(
        "lattice",
        {
            f"{STD}/generalization/lattice_search.py": ["_group", "Space.*", "Search.*"],
            f"{STD}/generalization/lattice.py": ["Lattice.run", "Lattice.run.*", "Lattice._best_loss",
                                                 "Lattice._best_metric"],
            "anonflow/api.py": ["suppression_limit"],
        },
        ("tests/plugins/generalization/test_lattice_oracle.py", "tests/plugins/generalization/test_lattice.py",
         "tests/runner/test_suppression_and_plan.py"),
    ),
    Target(
        "claims",
        {
            "anonflow/steps/algorithm_step.py": ["run_algorithm", "check_suppression"],
            "anonflow/steps/claims.py": ["check_claims"],
            "anonflow/steps/evaluate_step.py": ["EvaluateStep.run"],
            f"{STD}/common/counts.py": ["claimed"],
        },
        ("tests/steps/test_claims_and_thresholds.py", "tests/runner/test_suppression_and_plan.py",
         "tests/plugins/privacy/test_boundaries.py", "tests/registry/test_registration.py",
         "tests/hostile/test_engine.py::test_a_chained_algorithm_claims_its_own_model_not_its_inputs"),
    ),
    Target(
        "release",
        {
            f"{STD}/publishing/verify.py": ["verify"],
            f"{STD}/publishing/audit.py": ["verify_*", "compare_check"],
            f"{STD}/publishing/signing.py": ["check_signature"],
            f"{STD}/publishing/release_files.py": ["recorded_files", "recorded_files.*"],
            f"{STD}/publishing/findings.py": ["same"],
            f"{STD}/publishing/checks.py": ["planned_checks", "derive_checks", "claim_checks", "threshold_misses", "verdict",
                                            "run_file_checks"],
            f"{STD}/publishing/manifest.py": ["integrity", "field_digests", "load_release_table", "_sa_counts",
                                              "file_rows"],
        },
        ("tests/plugins/publishing/test_release_trust.py", "tests/plugins/publishing/test_release.py"),
    ),
]

# -- hand-written mutants ---------------------------------------------------------------------

M, MG, AK, CT, LJ, LAT, LATS = (f"{STD}/privacy/kanonymity.py", f"{STD}/privacy/distinct_diversity.py",
                                f"{STD}/privacy/alphak.py", f"{STD}/common/counts.py", f"{STD}/publishing/lossy_join.py",
                                f"{STD}/generalization/lattice.py", f"{STD}/generalization/lattice_search.py")

HAND = [
    # k-anonymity, in SQL
    HandMutant("privacy-sql", "k-anonymity counts a class of exactly k as violating (< for <=)", M,
               "count(*) FILTER (WHERE n < ?) FROM classes", "count(*) FILTER (WHERE n <= ?) FROM classes"),
    HandMutant("privacy-sql", "k-anonymity reports the largest class as k", M,
               '"SELECT min(n), count(*), count(*)', '"SELECT max(n), count(*), count(*)'),
    HandMutant("privacy-sql", "k-anonymity by values groups by the first QI only (a dropped column)", M,
               'group = anonymized, ", ".join(sql_ident(c) for c in quasi)',
               'group = anonymized, ", ".join(sql_ident(c) for c in quasi[:1])',
               kind="python"),
    HandMutant("privacy-sql", "k by QI values (beside k by class) takes the largest group", M,
               'vk = ctx.sql(f"SELECT min(n) AS k', 'vk = ctx.sql(f"SELECT max(n) AS k'),
    # distinct l-diversity / p-sensitive k-anonymity, in SQL
    HandMutant("privacy-sql", "p-sensitive: a class fails only when both n < k and d < p (OR -> AND)", MG,
               "WHERE n < ? OR d < ?", "WHERE n < ? AND d < ?"),
    HandMutant("privacy-sql", "l-diversity: exactly l distinct values counted as violating (< for <=)", MG,
               "WHERE n < ? OR d < ?", "WHERE n < ? OR d <= ?"),
    HandMutant("privacy-sql", "l-diversity counts the missing-value marker as a distinct value (dropped filter)",
               MG, "count(*) FILTER (WHERE NOT miss) AS d", "count(*) AS d"),
    HandMutant("privacy-sql", "l-diversity reports the most diverse class (min -> max)", MG,
               "(SELECT min(d) FROM per) AS least", "(SELECT max(d) FROM per) AS least"),
    # (alpha, k) and (alpha_i, k), in SQL
    HandMutant("privacy-sql", "alpha bound measured over all records, missing ones included (r -> n)", AK,
               "(c > alpha * r + {EPS}) AS bad", "(c > alpha * n + {EPS}) AS bad"),
    HandMutant("privacy-sql", "a class with no real sensitive value passes (dropped condition)", AK,
               "WHERE n < ? OR r = 0 UNION", "WHERE n < ? UNION"),
    HandMutant("privacy-sql", "a class of fewer than k records passes the alpha check (< k dropped)", AK,
               "WHERE n < ? OR r = 0 UNION", "WHERE r = 0 UNION"),
    HandMutant("privacy-sql", "the missing-value marker is bounded like a real value (dropped NOT miss)", AK,
               "FROM counts \"\n                  \"WHERE NOT miss\")", "FROM counts \"\n                  \"WHERE true\")"),
    HandMutant("privacy-sql", "records of suppressed classes (null _class) counted as a class", CT,
               'f"WHERE {sql_ident(CLASS)} IS NOT NULL"', 'f"WHERE true"'),
    HandMutant("privacy-sql", "r = n: missing values not taken out of a class's real records", CT,
               'f"n - sum(CASE WHEN {miss} THEN c ELSE 0 END) OVER (PARTITION BY cls) AS r', 'f"n AS r'),
    HandMutant("privacy-sql", "a lossy-join pair's class missing from one table goes unseen (IS DISTINCT -> <>)",
               CT, "WHERE q.n IS DISTINCT FROM s.n", "WHERE q.n <> s.n"),
    HandMutant("privacy-sql", "SA counts of a class absent from the QI table get dropped (LEFT JOIN -> JOIN)", CT,
               'f"LEFT JOIN (SELECT {cls} AS cls, count(*) AS n FROM {qi} GROUP BY {cls}) q ON s.cls = q.cls"',
               'f"JOIN (SELECT {cls} AS cls, count(*) AS n FROM {qi} GROUP BY {cls}) q ON s.cls = q.cls"'),
    # lossy join, in SQL
    HandMutant("privacy-sql", "the SA table counts non-null sensitive values, not records (count of the wrong column)",
               LJ, 'f"SELECT {cls} AS {sql_ident(class_column)}, {s}, count(*) AS',
               'f"SELECT {cls} AS {sql_ident(class_column)}, {s}, count({s}) AS'),
    HandMutant("privacy-sql", "the QI table's k groups by class id (the wrong relation)", LJ,
               "(SELECT min(n) FROM g WHERE n > 0) AS qi_table_k", "(SELECT min(n) FROM c WHERE n > 0) AS qi_table_k"),
    HandMutant("privacy-sql", "unique QI tuples counted as groups of at most 2", LJ,
               "(SELECT count(*) FROM g WHERE n = 1) AS unique_records",
               "(SELECT count(*) FROM g WHERE n <= 2) AS unique_records"),
    HandMutant("privacy-sql", "class_k is the largest class", LJ,
               "SELECT (SELECT min(n) FROM c) AS class_k", "SELECT (SELECT max(n) FROM c) AS class_k"),
    # the lattice's choice and suppression limit (issue 13's survivors)
    HandMutant("lattice", "with suppression, only minimal nodes are scored", LAT,
               "cand = np.flatnonzero((flat == 1) | (flat == 2))", "cand = minimal", kind="python"),
    HandMutant("lattice", "without suppression, minimal nodes ordered by height before loss", LAT,
               "order = np.lexsort((cand, heights[cand], np.round(bound[cand], 12)))\n            best",
               "order = np.lexsort((cand, np.round(bound[cand], 12), heights[cand]))\n            best",
               kind="python"),
    HandMutant("lattice", "suppressed records add no loss when nodes are compared", LATS,
               "value += extra / sp.n", "value += 0.0 * extra / sp.n", kind="python"),
    HandMutant("lattice", "the suppression limit rounds up (ceil for floor)", "anonflow/api.py",
               "return int(math.floor(float(cap) * records + 1e-9))",
               "return int(math.ceil(float(cap) * records - 1e-9))", kind="python"),
    # verify (issue 13's survivors, and what a forger would exploit)
    HandMutant("release", "verify does not compare workflow.text with its recorded sha256", f"{STD}/publishing/verify.py",
               'f.add(text_hash == wf.get("sha256"), "manifest field workflow.text",',
               'f.add(True, "manifest field workflow.text",', kind="python"),
    HandMutant("release", "verify does not report manifest fields added after the release was written",
               f"{STD}/publishing/verify.py", "added = [k for k in now if k not in was]", "added = []", kind="python"),
    HandMutant("release", "verify does not report manifest fields removed after the release was written",
               f"{STD}/publishing/verify.py", "removed = [k for k in was if k not in now]", "removed = []", kind="python"),
    HandMutant("release", "verify ignores unlisted .csv / .parquet / .html files", f"{STD}/publishing/verify.py",
               "if path.name in (MANIFEST, SIGNATURE) or path.name in listed:",
               "if path.name in (MANIFEST, SIGNATURE) or path.name in listed or path.suffix in "
               "('.csv', '.parquet', '.html'):", kind="python"),
    HandMutant("release", "verify does not compare a file's rows with the manifest", f"{STD}/publishing/verify.py",
               'if entry.get("format") in ("parquet", "csv") and rows != entry.get("rows"):',
               'if entry.get("format") in ("parquet", "csv") and rows != rows:', kind="python"),
    # claims and thresholds
    HandMutant("claims", "an algorithm's suppression is checked against a cap one record too generous",
               "anonflow/steps/algorithm_step.py", "if suppressed <= limit:\n        return",
               "if suppressed <= limit + 1:\n        return", kind="python"),
    HandMutant("claims", "an algorithm's claims are not checked on its output", "anonflow/steps/algorithm_step.py",
               "return check_claims(node, renumber_classes(out, store), ctx, where, registry, inherited), None",
               "return renumber_classes(out, store), None", kind="python"),
    HandMutant("claims", "a claim whose check fails is kept", "anonflow/steps/claims.py",
               "        if not holds:\n            raise RunError", "        if holds is None:\n            raise RunError",
               kind="python"),
    HandMutant("claims", "a claim no metric can check is kept", "anonflow/steps/claims.py",
               "can check it\")\n            continue", "can check it\")\n            kept[model] = given\n"
               "            continue", kind="python"),
    HandMutant("claims", "a privacy check that does not hold is not enforced", "anonflow/steps/evaluate_step.py",
               'if params["enforce"] and reg.obj.category == "privacy" and holds is not None and not holds:',
               'if params["enforce"] and reg.obj.category == "privacy" and holds is not None and holds < 0:',
               kind="python"),
    HandMutant("claims", "a value equal to a min threshold fails it", "anonflow/steps/evaluate_step.py",
               'if "min" in bound and not (v >= bound["min"]):', 'if "min" in bound and not (v > bound["min"]):',
               kind="python"),
]

#: surviving tool mutants that cannot change behaviour: change key -> why
_NO_K = ("with no k, the count of classes below k is not reported, and no class has fewer than 1 "
         "record, so any k <= 1 gives the same (unreported) count")
_COUNT = "a count of records is never negative, so > 0 and != 0 agree"
_ORDER = ("changes only the order or number of nodes checked, not any verdict: every node is still classified "
          "(a monotone model's tags are implied by verdicts) and the choice is made over all of them")
_BY = "by is 'class' or 'values' (the parameter's choices, or the default): 'values' > 'class', so <= is =="
_LOOP = ("the least cap is found by the loop from any start at or below it, and the loop runs only if "
         "floor(ceil(100 s / n) / 100 * n) < s, i.e. when the fractional part of 100 s / n (a multiple of 1 / n) "
         "is at most 1e-9: never below a billion records")
EQUIVALENT: dict[str, str] = {
    f"{AK}: row = sql(query, [int(k or 0)], **tables).to_pylist()[0] "
    f"=> row = sql(query, [int(k or 0)], **tables).to_pylist()[ -1]": "the query returns exactly one row",
    f"{M}: if by == \"class\": => if by <= \"class\":": _BY,
    f"{MG}: return ctx.sql(query, [int(k or 0), int(p or 0)], published=data).to_pylist()[0] "
    f"=> return ctx.sql(query, [int(k or 0), int(p or -1)], published=data).to_pylist()[0]":
        "no class has a negative distinct count: d < 0 and d < -1 are both never true",
    f"{LATS}: if self._cache[j].levels == levels: => if self._cache[j].levels >= levels:":
        "the cached node is below the target in every coordinate; lexicographically >= as well only if equal",
    f"{LATS}: sat = self.status == 1 => sat = self.status >= 1": "a node's status is -1, 0 or 1",
    f"{LAT}: minimal = np.flatnonzero(search.minimal().reshape(-1)) "
    f"=> minimal = np.flatnonzero(search.minimal().reshape(- 2))":
        "numpy reads any negative size of a one-dimensional reshape as 'the rest': the same flat array",
    f"{CT}: if by == \"class\" and CLASS not in table.columns: => if by <= \"class\" and CLASS not in table.columns:":
        _BY,
    f"{CT}: if key == \"p\": => if key >= \"p\":":
        "key is 'k' (handled above), 'p' or 'l', and 'l' < 'p': >= is == on every key the module passes",
    "anonflow/steps/algorithm_step.py: need = min(math.ceil(suppressed / records * 100 - 1e-9) / 100, 1.0) "
    "=> need = min(math.ceil(suppressed / records * 100 * 1e-9) / 100, 1.0)":
        "need then starts at 0.01, and the loop raises it by 0.01 until the cap suffices: the same least cap",
    "anonflow/steps/algorithm_step.py: while need < 1.0 and suppression_limit(need, records) < suppressed: "
    "=> while need != 1.0 and suppression_limit(need, records) < suppressed:": _LOOP,
    "anonflow/steps/algorithm_step.py: while need < 1.0 and suppression_limit(need, records) < suppressed: "
    "=> while need < 2.0 and suppression_limit(need, records) < suppressed:": _LOOP,
    f"{LATS}: self.kept = np.round(1 - kept / sp.d, 12) => self.kept = np.round(1 - kept + sp.d, 12)": _ORDER,
    f"{LATS}: if self.flat[s] == 0: => if self.flat[s] <= 0:": _ORDER,
    "anonflow/steps/evaluate_step.py: if original is not None and anonymized.num_rows < original.num_rows and ROW in "
    "anonymized.columns: => if original is not None and anonymized.num_rows <= original.num_rows and ROW in "
    "anonymized.columns:":
        "with as many published records as original ones every original record is kept, and ctx.suppressed is 0 "
        "either way",
    "anonflow/steps/algorithm_step.py: need = min(round(need + 0.01, 2), 1.0) => need = min(round(need // 0.01, 2), 1.0)":
        "the loop runs only if floor(ceil(100 s / n) / 100 * n) < s, i.e. when the fractional part of 100 s / n "
        "(a multiple of 1 / n) is at most 1e-9: never below a billion records",
    f"{STD}/publishing/audit.py: f.add(False, f\"file {{name}}\", f\"cannot be read: {{error_text(exc)}}\") "
    f"=> f.add(True, f\"file {{name}}\", f\"cannot be read: {{error_text(exc)}}\")":
        "the column check reads only files whose sha256 and rows were already read back (intact); a file Parquet "
        "cannot read has failed there first, so this finding's verdict never decides the outcome",
    f"{CT}: columns = data.column_names if by == \"class\" else [c for c in data.column_names if c != CLASS] "
    f"=> columns = data.column_names if by == \"class\" else [c for c in data.column_names if c <= CLASS]":
        "by values, the data comes from grouped_part, which has already dropped _class: the filter removes nothing "
        "that matters (no column left names the class)",
    f"{LATS}: prec += (np.arange(lv.height + 1) / max(lv.height, 1))[grid[i]] "
    f"=> prec += (np.arange(lv.height + 1) * max(lv.height, 1))[grid[i]]": _ORDER,
    f"{LATS}: if self.flat[node] != 0: => if self.flat[node] > 0:": _ORDER,
    f"{AK}: return (sizes >= (params.get(\"k\") or 1)) & (real > 0) & np.all(counts <= alpha * real[:, None] + EPS, axis=1) "
    f"=> return (sizes >= (params.get(\"k\") or 1)) * (real > 0) & np.all(counts <= alpha * real[:, None] + EPS, axis=1)":
        "* binds before &, and the product of two boolean arrays is the boolean array of their and",
    f"{STD}/common/columns.py: if j < 0: => if j < -1:":
        "without a marker j is -1; the marker branch then removes no (class, value) pair (no code % m is -1) and "
        "counts the same distinct values",
    f"{AK}: return (sizes >= (params.get(\"k\") or 1)) & (real > 0) & np.all(counts <= alpha * real[:, None] + EPS, axis=1) "
    f"=> return (sizes >= (params.get(\"k\") or 1)) & (real != 0) & np.all(counts <= alpha * real[:, None] + EPS, axis=1)":
        _COUNT,
    f"{M}: [k or 0], published=published).to_pylist()[0] => [k or -1], published=published).to_pylist()[0]": _NO_K,
    f"{M}: [k or 0], published=published).to_pylist()[0] => [k or 1], published=published).to_pylist()[0]": _NO_K,
}
