"""Running a workflow: the plan (:mod:`.plan`), the run loop (:mod:`.loop`), the executors
fragments run on (:mod:`.executors`), the fragments' grouping and merging (:mod:`.fragments`),
the checks of where a run writes (:mod:`.output_checks`) and a step's cache key
(:mod:`.fingerprint`). What each kind of step does is :mod:`anonflow.steps`."""

from __future__ import annotations

from .fingerprint import Fingerprint, step_plugins
from .loop import Reporter, Runner, RunResult, default_output_dir, load_run_info, step_seed, versions
from .plan import Node, Plan, build_plan, plan_json

__all__ = ["Runner", "RunResult", "Reporter", "Fingerprint", "Node", "Plan", "build_plan", "plan_json",
           "default_output_dir", "load_run_info", "step_plugins", "step_seed", "versions"]
