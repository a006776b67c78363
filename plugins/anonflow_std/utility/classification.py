"""``classification-accuracy`` (utility): k-fold cross-validated accuracy of a classifier
trained on the published table to predict the label (seed 004 section 4); needs
scikit-learn (``pip install 'anonflow[ml]'``). A continuous feature published as hierarchy
labels is read as the midpoint of the leaves a label covers (:func:`midpoints`)."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from anonflow.api import (CLASS, Attribute, Hierarchy, InputError, Metric, Param, StepContext, TypedTable,
                          generalization, numeric_column, value_keys)

from .. import __version__
from ..common.hierarchy_levels import Levels, category_codes, label_column


def midpoints(h: Hierarchy, values: pa.Array | pa.ChunkedArray, column: str) -> np.ndarray:
    """Numbers for a continuous column published as hierarchy labels: a label's value is the
    midpoint of the leaves it covers (at the lowest level the label appears); plain numbers
    stay as they are."""
    lv = Levels(h)
    pos = lv.positions(Attribute(column, "quasi", "continuous"))
    keys = value_keys(values)
    out = np.full(len(keys), np.nan)
    for level in range(lv.height + 1):
        lo, hi = lv.ranges(level, pos)
        idx = pc.fill_null(pc.index_in(keys, value_set=lv.labels[level]), -1).to_numpy(zero_copy_only=False)
        hit = np.isnan(out) & (idx >= 0)
        out[hit] = (lo[idx[hit]] + hi[idx[hit]]) / 2
    return out


class ClassificationAccuracy(Metric):
    name = "classification-accuracy"
    version = __version__
    description = ("k-fold cross-validated accuracy of a classifier (logistic regression, least-squares linear, or a "
                   "decision tree) trained on the published table to predict the label (seed 004 section 4); needs "
                   "scikit-learn: pip install 'anonflow[ml]'.")
    category = "utility"
    better = "higher"
    requires_original = False
    params = (
        Param("label", "str", default=None, nullable=True, help="the label column (default: the only one typed)"),
        Param("features", "list", items="str", default=None, nullable=True,
              help="feature columns (default: the quasi-identifiers)"),
        Param("folds", "int", default=3, min=2, help="cross-validation folds (stratified, shuffled)"),
        Param("seed", "int", default=0, min=0, help="seed of the fold assignment"),
        Param("max_iter", "int", default=1000, min=1, help="iterations of the logistic regression solver"),
        Param("classifier", "str", default="logistic", choices=("logistic", "linear", "tree"),
              help="logistic regression; linear: least-squares regression on the label, thresholded (the "
                   "'linear regression' of seed 004); tree: a decision tree (seeded)"),
    )

    def check(self, params: Mapping[str, Any], **tables: Any) -> None:
        import importlib.util

        if importlib.util.find_spec("sklearn") is None:
            raise InputError("classification-accuracy needs scikit-learn: pip install 'anonflow[ml]'")
        table = tables.get("anonymized") if tables.get("anonymized") is not None else tables.get("typed")
        if table is not None:
            label_column(table, params.get("label"), self.name)

    def compute(self, original: TypedTable | None, anonymized: TypedTable, params: Mapping[str, Any],
                ctx: StepContext) -> dict[str, float]:
        try:
            from sklearn.compose import ColumnTransformer
            from sklearn.linear_model import LogisticRegression, RidgeClassifier
            from sklearn.tree import DecisionTreeClassifier
            from sklearn.model_selection import StratifiedKFold, cross_val_score
            from sklearn.pipeline import make_pipeline
            from sklearn.preprocessing import OneHotEncoder, StandardScaler
        except ImportError:
            raise InputError("classification-accuracy needs scikit-learn: pip install 'anonflow[ml]'") from None
        data = anonymized.data
        if CLASS in data.column_names and data.column(CLASS).null_count:
            data = data.filter(pc.is_valid(data.column(CLASS)))
        table = anonymized.replace(data=data)
        label = label_column(table, params["label"], self.name)
        features = params["features"] if params["features"] is not None else table.typing.quasi
        if not features:
            raise InputError("classification-accuracy needs feature columns: quasi-identifiers or 'features'")
        y = category_codes(data.column(label))
        smallest = int(np.bincount(y).min())
        if smallest < params["folds"]:
            raise InputError(f"classification-accuracy: the rarest label value occurs {smallest} time(s), fewer than "
                             f"the {params['folds']} folds")
        cols, numeric = [], []
        for f in features:
            if f not in data.column_names:
                raise InputError(f"classification-accuracy: feature {f!r} is not a column of the table")
            if f == label:
                raise InputError(f"classification-accuracy: the label {f!r} cannot be a feature")
            attr = table.typing.get(f) if f in table.typing else None
            col = data.column(f)
            if attr is not None and attr.type == "continuous":
                info = generalization(table, f) or {}
                if pa.types.is_integer(col.type) or pa.types.is_floating(col.type):
                    x = col.to_numpy().astype(np.float64)
                elif info.get("kind") == "interval" and info.get("lo") in data.column_names \
                        and info.get("hi") in data.column_names:
                    # an interval published with its bounds (anonflow.generalization): its midpoint
                    x = (numeric_column(table, info["lo"], metric=self.name)
                         + numeric_column(table, info["hi"], metric=self.name)) / 2
                elif f in table.hierarchies:
                    x = midpoints(table.hierarchies[f], col, f)
                else:
                    x = np.full(len(col), np.nan)
                if np.isnan(x).any():
                    bad = value_keys(col)[int(np.flatnonzero(np.isnan(x))[0])].as_py()
                    raise InputError(f"classification-accuracy: continuous feature {f!r} holds {bad!r}, which is "
                                     "neither a number, nor an interval with bound columns, nor a label of its "
                                     "hierarchy; attach its hierarchy (hierarchy step) or leave it out of features:")
                numeric.append(True)
            else:
                x = category_codes(col).astype(np.float64)
                numeric.append(False)
            cols.append(x)
        X = np.column_stack(cols)
        num = [i for i, is_num in enumerate(numeric) if is_num]
        cat = [i for i, is_num in enumerate(numeric) if not is_num]
        parts = []
        if num:
            parts.append(("numeric", StandardScaler(), num))
        if cat:
            parts.append(("categorical", OneHotEncoder(handle_unknown="ignore"), cat))
        classifier = {"logistic": lambda: LogisticRegression(max_iter=params["max_iter"]),
                      # least squares on the {-1, 1}-coded label (one column per class), predicted by the
                      # largest output: linear regression used as a classifier; a tiny ridge keeps it defined
                      "linear": lambda: RidgeClassifier(alpha=1e-6),
                      "tree": lambda: DecisionTreeClassifier(random_state=params["seed"])}[params["classifier"]]()
        model = make_pipeline(ColumnTransformer(parts), classifier)
        folds = StratifiedKFold(n_splits=params["folds"], shuffle=True, random_state=params["seed"])
        scores = cross_val_score(model, X, y, cv=folds, scoring="accuracy")
        return {self.name: float(scores.mean()), f"{self.name}.std": float(scores.std()),
                f"{self.name}.majority": float(np.bincount(y).max() / y.size),
                f"{self.name}.records": float(y.size), f"{self.name}.features": float(len(features))}


PLUGINS = [ClassificationAccuracy()]
