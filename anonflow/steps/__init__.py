"""The kinds of workflow node, one module each, as :class:`~anonflow.steps.step.Step` objects.

:data:`STEPS` registers them by kind, in the order the documentation lists them; the plan and
the run loop find a node's step with :func:`step_of` and ask it (cacheable? preparation?
keeps typing?...) instead of testing kinds. :data:`BUILTINS` are those a workflow names by
``uses:`` (a source is declared under ``sources:``, an algorithm is named by its plugin).

Adding a built-in step: one module here with its ``Step`` subclass, and its registration: an
import and an entry in the :data:`STEPS` tuple below.
"""

from __future__ import annotations

from typing import Any

from .algorithm_step import AlgorithmStep
from .evaluate_step import EvaluateStep
from .filter_step import FilterStep
from .hierarchy_step import HierarchyStep
from .partition_step import DEFAULT_MAX_RECORDS, PartitionStep
from .publish_step import PublishStep, for_publication
from .sample_step import SampleStep
from .source_step import SourceStep
from .step import SourceRun, StaticInput, Step, StepOutput, StepRun
from .typing_step import MISSING_SPELLINGS, TypingStep, infer_type

#: every kind of node, by kind
STEPS: dict[str, Step] = {s.kind: s for s in (SourceStep(), TypingStep(), FilterStep(), SampleStep(), HierarchyStep(),
                                              PartitionStep(), AlgorithmStep(), EvaluateStep(), PublishStep())}
#: the steps a workflow names by ``uses:``, by that name
BUILTINS: dict[str, Step] = {s.uses: s for s in STEPS.values() if s.uses}


def step_of(node: Any) -> Step:
    """The step of a plan's node (by its kind)."""
    return STEPS[node.kind]


__all__ = ["STEPS", "BUILTINS", "step_of", "Step", "StepRun", "StepOutput", "SourceRun", "StaticInput",
           "SourceStep", "TypingStep", "FilterStep", "SampleStep", "HierarchyStep", "PartitionStep", "AlgorithmStep",
           "EvaluateStep", "PublishStep", "for_publication", "infer_type", "MISSING_SPELLINGS", "DEFAULT_MAX_RECORDS"]
