"""The workflow file format: its declaration (:mod:`.model`), the check of a parsed file
against it (:mod:`.checking`), loading a file into a :class:`WorkflowSpec` (:mod:`.spec`), and
the JSON Schema and reference tables generated from it (:mod:`.reference`)."""

from .checking import check_workflow
from .model import FORMATS, IN_MEMORY, MAX_SEED, MEMORY_SIZE, RETAIN, workflow_model
from .spec import (Resources, SourceSpec, StepSpec, WorkflowSpec, check_memory, check_threads, load_workflow,
                   parse_override, read_workflow, workflow_from_data)

__all__ = ["FORMATS", "IN_MEMORY", "MAX_SEED", "MEMORY_SIZE", "RETAIN", "Resources", "SourceSpec", "StepSpec",
           "WorkflowSpec", "check_memory", "check_threads", "check_workflow", "load_workflow", "parse_override",
           "read_workflow", "workflow_from_data", "workflow_model"]
