"""The session (anonflow.session.Session): the run sequence written once, and the engine handle
(anonflow.api.Engine) the release publisher's verify and apply reach the engine through."""

import ast
import inspect
from pathlib import Path

import pyarrow as pa
import pytest

import anonflow
from anonflow.api import Engine
from anonflow.errors import InputError, WorkflowError
from anonflow.session import Session
from anonflow.workflow.model import top_level_keys

ROOT = Path(__file__).resolve().parents[2]
STD = ROOT / "plugins" / "anonflow_std" / "publishing"


def _engine_methods():
    return [n for n, v in vars(Engine).items() if not n.startswith("_") and callable(v)]


def test_the_session_offers_everything_the_engine_protocol_declares():
    assert {"load_recorded", "rerun", "read_source", "scratch_sql", "prepare_batch", "check_output_folder",
            "write_folder"} <= set(_engine_methods())
    session = Session()
    for name in _engine_methods():
        declared = inspect.signature(getattr(Engine, name))
        offered = inspect.signature(getattr(session, name))
        wanted = [p for p in declared.parameters if p != "self"]
        assert wanted == list(offered.parameters), f"Session.{name}{offered} is not Engine.{name}{declared}"
    assert session.registry is not None and "registry" in Engine.__annotations__


def _function(path: Path, name: str) -> ast.FunctionDef:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name)


@pytest.mark.parametrize("path,name", [(STD / "verify.py", "_rerun_confined"), (STD / "release_apply.py", "apply_release")])
def test_the_release_publisher_reaches_the_engine_only_through_the_handle(path, name):
    """No import in the function: no Runner, plan, Store, spec or registry of the engine's own."""
    fn = _function(path, name)
    imports = [n for n in ast.walk(fn) if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert not imports, f"{name} imports {[ast.unparse(i) for i in imports]}"
    assert "engine" in [a.arg for a in fn.args.args + fn.args.kwonlyargs]
    called = {n.func.id for n in ast.walk(fn) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    assert not called & {"Runner", "Store", "build_plan", "load_workflow", "get_registry", "prepare_batch",
                         "write_folder", "check_output_folder"}


def test_only_the_session_builds_a_runner():
    """THE run sequence is written once: the CLI, the Python API and anonflow.testing call the session."""
    for path in [*sorted((ROOT / "anonflow" / "cli").glob("*.py")), ROOT / "anonflow" / "workflow_api.py",
                 ROOT / "anonflow" / "testing.py"]:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        called = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
        imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
        assert not (called | imported) & {"Runner", "build_plan", "preview"}, path.name


def test_apply_without_the_engine_is_refused_in_one_line(tmp_path):
    from anonflow.registry import get_registry

    publisher = get_registry().get("publisher", "release").obj
    with pytest.raises(InputError, match=r"^applying a release needs the engine: give apply\(\.\.\., engine=\.\.\.\)"):
        publisher.apply(tmp_path / "release", tmp_path / "new.csv", tmp_path / "out")


def test_a_python_workflow_takes_its_top_level_keys_from_the_schema():
    with pytest.raises(WorkflowError) as err:
        anonflow.Workflow.from_dict({"name": "w", "stepz": {}})
    assert err.value.message == ("unknown key 'stepz' (did you mean 'steps'?); expected one of "
                                 + ", ".join(top_level_keys()))
    assert "retain" in top_level_keys() and "executor" in top_level_keys()


def test_settings_are_built_once_with_the_callers_option_names(tmp_path):
    resources, executor = Session.settings(memory="1GB", threads=2, temp_dir=tmp_path, executor="processes:2",
                                           work_dir=tmp_path / "w")
    assert (resources.memory, resources.threads, resources.temp_directory) == ("1GB", 2, tmp_path)
    assert (executor.kind, executor.workers, executor.work_dir) == ("processes", 2, str(tmp_path / "w"))
    with pytest.raises(WorkflowError, match=r"^--memory: resources.memory must be a size such as 2GB"):
        Session.settings(memory="lots", names={"memory": "--memory"})
    with pytest.raises(InputError) as err:
        Session.settings(executor="nowhere", names={"executor": "--executor"})
    assert err.value.where == "--executor"


def test_the_session_runs_and_previews_a_workflow_in_memory(tmp_path):
    data = pa.table({"age": [30, 31, 32, 33, 40, 41], "zip": ["a", "a", "b", "b", "c", "c"]})
    wf = anonflow.Workflow("w", base_dir=tmp_path, sources={"people": data})
    wf.add_step("typed", "typing", "people", quasi={"age": "continuous"}, insensitive=["zip"])
    wf.add_step("grouped", "mdav", "typed", k=2)
    session = Session()
    spec = wf.spec()
    plan = session.plan(spec)
    previews = session.preview(plan)
    assert [a.name for a in previews["typed"]["typing"].attributes] == ["age", "zip"]
    with session.open_store() as store:
        result = session.run(spec, plan=plan, store=store)
        assert result.status == "succeeded"
        assert [s["step"] for s in store.steps(result.run_id)] == ["people", "typed", "grouped"]
