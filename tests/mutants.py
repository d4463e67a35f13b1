"""Break each guarantee on purpose and count the tests that go red.

    python -m tests.mutants                  run every named mutant; exit 1 if one survives
    python -m tests.mutants --update-docs  also rewrite the figures in docs/proof.md
    python -m tests.mutants --only release   only the mutants whose name contains "release"

Each mutant is a small edit of the package, applied to a copy of the project in a
temporary folder; the tests that guard that part run against the copy (the copy comes first
on PYTHONPATH, for child processes too). Two mutants run at once, each in a copy of its own.
A mutant survives when no test goes red. Every test that went red then runs on the
unmutated copy: if one is red there too, nothing is concluded. A mutant of the logic
shared by both databases runs the SQLite half of its tests; one of the PostgreSQL backend
runs its tests whole.

Each mutant names the quickest test files that see its break, quickest first, and its run
stops at its first red test (``--maxfail=1``): one red test kills a mutant, and a broken
wait costs seconds per red test. ``--update-docs`` runs every test, for the counts. The
real-process tests (test_crash, test_concurrency, test_liveness, test_release,
test_saga_crash) and the state machines guard the same rules in the suite; here they would
cost minutes for breaks that quicker tests see too, so a mutant names one only where
nothing quicker goes red.
"""

import argparse
import concurrent.futures
import functools
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parent.parent
CLAIM_THEN_ACT = """            case Claim():
                return self._claim(request)
"""
ACT_NOW = "                    ran.returned(self._fn(record.key, *args, **kwargs))"
UNDO_KEY = "        key = compensation_key(step)\n        outcome = yield Compensate("
CLAIM_SYNCED = (
    "self._transaction(sync=True) as db:\n"
    "                if approval is not None and not _consumed("
)
DECIDE_UNSETTLED = "return Wait(record) if reason is None else Doubt(record, reason)"
CLAIM_RELEASED = "(*attempt, arguments, key, State.RELEASED.value, previous.attempt_id),"
CLAIM_ANY = "(*attempt, arguments, key, previous.state.value, previous.attempt_id),"
PROVEN = "    if reason in PROOF:\n        return None"
NOT_STORED = 'as happened",\n            forceable=False,'
OWNER_WRITES = "_OWNER_WRITES = frozenset({State.ATTEMPTING, State.IN_DOUBT, State.RELEASED})"
PROBE_RELEASE = "step.result, why=Why.RECONCILED, note=step.note)"
SETTLE_RECHECK = (
    "            reason = self._abandonment(current, utc_now())\n            if reason is None:\n"
)
CRASH_PROOF = (
    "            if reason is DoubtReason.CRASHED and not self._owner_gone(current):\n"
    "                return False\n"
)
DBOS_KEY = "return f\"dbos:{quote(workflow_id, safe='')}:{call.tool}:{call.digest[:16]}\""
TEMPORAL_KEY = (
    "return f\"temporal:{quote(info.workflow_id, safe='')}:{call.tool}:{call.digest[:16]}\""
)
THREAD_KEY = 'return f"langgraph:{_thread(call)}:{call.tool}:{call.digest[:16]}"'
COUNT_OF_BEFORE = '''        """INSERT INTO key_counts (tool, state, shard, n)
        SELECT tool, state, 0, count(*) FROM calls
        WHERE state NOT IN ('attempting', 'in_doubt') GROUP BY tool, state""",
'''
COUNTING_FUNCTION = '        """CREATE FUNCTION safeact_count_calls()'
RUN_KEY = 'return f"{_run_key(call)}:{call.tool}:{call.digest[:16]}"'
AGENTS_TOOL = """    return agents.function_tool(
        body,
        name_override=tool_name,
        description_override=text,
        failure_error_function=_failure,
        needs_approval=False if gate is None else gate,
    )
"""
AGENTS_BY_CALL_ID = """    made = agents.function_tool(
        body,
        name_override=tool_name,
        description_override=text,
        failure_error_function=_failure,
        needs_approval=False if gate is None else gate,
    )
    invoke = made.on_invoke_tool

    async def by_call_id(context: Any, arguments: str) -> Any:
        with run_scope(context.tool_call_id):
            return await invoke(context, arguments)

    made.on_invoke_tool = by_call_id
    return made
"""


SQLITE_HALF = "not postgres"


class Edit(NamedTuple):
    path: str
    old: str
    new: str


class Mutant(NamedTuple):
    name: str
    edits: list[Edit]
    tests: list[str]
    select: str = SQLITE_HALF
    """A pytest ``-k`` expression: the logic is one for both databases, so the SQLite half of
    its tests is enough to catch it, in half the time; a PostgreSQL mutant runs them all."""


MUTANTS = [
    Mutant(
        "run the action before the ATTEMPTING commit",
        [
            # The sync driver runs the action when asked to claim, and hands its value over
            # when asked to act: the action ran before the claim was written.
            Edit(
                "safeact/_tool.py",
                CLAIM_THEN_ACT,
                CLAIM_THEN_ACT.replace(
                    "return self._claim(",
                    "self._early = self._fn(request.key, *args, **kwargs)\n"
                    "                return self._claim(",
                ),
            ),
            Edit("safeact/_tool.py", ACT_NOW, "                    ran.returned(self._early)"),
        ],
        ["tests/test_guarded_call.py", "tests/test_ledger.py", "tests/test_history.py"],
    ),
    Mutant(
        "act on a claim another caller won",
        [
            Edit(
                "safeact/_call.py",
                "    if claimed is None:\n"
                "        return None\n"
                "    return (yield from _run(claimed, tool, encode))",
                "    return (yield from _run(claimed or claim.previous, tool, encode))",
            )
        ],
        ["tests/test_call_core.py", "tests/test_guarded_call.py"],
    ),
    Mutant(
        "commit ATTEMPTING without syncing it",
        [
            Edit(
                "safeact/_transitions.py",
                CLAIM_SYNCED,
                CLAIM_SYNCED.replace("sync=True", "sync=False"),
            )
        ],
        ["tests/test_group_commit.py", "tests/test_ledger.py"],
    ),
    Mutant(
        "treat ATTEMPTING as re-runnable",
        [
            Edit(
                "safeact/_protocol.py",
                DECIDE_UNSETTLED,
                "return Wait(record) if reason is None else "
                "(Run(record) if record.state is State.ATTEMPTING else Doubt(record, reason))",
            ),
            Edit("safeact/_transitions.py", CLAIM_RELEASED, CLAIM_ANY),
        ],
        [
            "tests/test_protocol.py",
            "tests/test_guarded_call.py",
            "tests/test_history.py",
            "tests/test_reconcile.py",
        ],
    ),
    Mutant(
        "replace the unique insert with an upsert",
        [
            Edit(
                "safeact/_transitions.py",
                '"ON CONFLICT (key) DO NOTHING",',
                '"ON CONFLICT (key) DO UPDATE SET attempt_id = excluded.attempt_id, "\n'
                '                        "owner_pid = excluded.owner_pid",',
            )
        ],
        ["tests/test_concurrency.py", "tests/test_ledger.py", "tests/test_state_machine.py"],
    ),
    Mutant(
        "let a FAILED key re-run",
        [
            Edit(
                "safeact/_protocol.py",
                "case State.SUCCEEDED | State.FAILED:\n            return Replay(record)",
                "case State.FAILED:\n            return Run(record)\n"
                "        case State.SUCCEEDED:\n            return Replay(record)",
            ),
            Edit("safeact/_transitions.py", CLAIM_RELEASED, CLAIM_ANY),
        ],
        ["tests/test_guarded_call.py", "tests/test_async.py", "tests/test_saga.py"],
    ),
    Mutant(
        "skip the args-hash check",
        [
            Edit(
                "safeact/_protocol.py",
                "if record.args_hash != args_hash and (",
                "if record.args_hash != record.args_hash and (",
            )
        ],
        [
            "tests/test_protocol.py",
            "tests/test_guarded_call.py",
            "tests/test_keyed.py",
            "tests/test_saga.py",
        ],
    ),
    Mutant(
        "let a loser mark a live owner's key IN_DOUBT",
        [
            Edit(
                "safeact/_protocol.py",
                DECIDE_UNSETTLED,
                # Suspicion, which a live owner's row may take; crashed needs proof, and a
                # caller refused its mark only decides again, for ever.
                "return Doubt(record, reason or DoubtReason.LEASE_EXPIRED)",
            )
        ],
        ["tests/test_guarded_call.py", "tests/test_async.py", "tests/test_reconcile.py"],
    ),
    Mutant(
        "let a late completion be dropped",
        [
            Edit(
                "safeact/_transitions.py",
                "                return True\n            db.execute(\n",
                "                return True\n            return False\n            db.execute(\n",
            )
        ],
        ["tests/test_guarded_call.py", "tests/test_history.py"],
    ),
    Mutant(
        "compensate in forward order",
        [
            Edit(
                "safeact/_saga_run.py",
                "for key in reversed(saga.steps):",
                "for key in saga.steps:",
            )
        ],
        ["tests/test_saga.py", "tests/test_saga_async.py"],
    ),
    Mutant(
        "forget to record a compensation",
        [
            # The sync driver calls the compensation itself, not as a guarded call.
            Edit(
                "safeact/_saga.py",
                "from safeact._outcome import Outcome\n",
                "from safeact._outcome import Outcome, Succeeded\n",
            ),
            Edit(
                "safeact/_saga.py",
                "return watch.ended(_call_sync(tool, request.key, (request.value,), {}))",
                "return watch.ended(Succeeded(request.key, request.undo.call(request.key, "
                "request.value)))",
            ),
        ],
        ["tests/test_saga.py", "tests/test_saga_in_doubt.py"],
    ),
    Mutant(
        "re-run a compensation after a crash",
        [
            Edit(
                "safeact/_saga_run.py",
                UNDO_KEY,
                UNDO_KEY.replace(
                    "compensation_key(step)", 'f"{compensation_key(step)}:{id(self)}"'
                ),
            )
        ],
        ["tests/test_saga.py"],
    ),
    Mutant(
        "release on a lease that ran out",
        [
            Edit(
                "safeact/_protocol.py",
                PROVEN,
                PROVEN.replace("in PROOF:", "in PROOF | {DoubtReason.LEASE_EXPIRED}:"),
            )
        ],
        ["tests/test_protocol.py", "tests/test_proof.py"],
    ),
    Mutant(
        "let force release a key whose result was not stored",
        [Edit("safeact/_protocol.py", NOT_STORED, NOT_STORED.replace("False", "True"))],
        ["tests/test_protocol.py", "tests/test_proof.py"],
    ),
    Mutant(
        "let a forked child write its parent's attempt",
        [
            Edit(
                "safeact/_protocol.py",
                "    return record.owner.pid == pid",
                "    return record.owner.pid == pid or True",
            )
        ],
        ["tests/test_protocol.py"],
    ),
    Mutant(
        "swap a late completion into a settled key",
        [
            Edit(
                "safeact/_transitions.py",
                OWNER_WRITES,
                OWNER_WRITES.replace("State.RELEASED}", "State.RELEASED, State.SUCCEEDED}"),
            )
        ],
        ["tests/test_proof.py"],
    ),
    Mutant(
        "let a probe's not-happened release an unproven owner",
        [
            # The store applies every probe's settling verdict with this one call; force
            # changes only a release (not happened), which is the guarantee at stake.
            Edit(
                "safeact/_store.py",
                PROBE_RELEASE,
                PROBE_RELEASE.replace("note=step.note)", "note=step.note, force=True)"),
            )
        ],
        ["tests/test_proof.py"],
    ),
    Mutant(
        "mark a key crashed without proof",
        [Edit("safeact/_transitions.py", CRASH_PROOF, "")],
        ["tests/test_proof.py"],
    ),
    Mutant(
        "record a forced release as an ordinary resolve",
        [
            Edit(
                "safeact/_transitions.py",
                "                    why = Why.FORCED_RELEASE\n",
                "                    why = why\n",
            )
        ],
        ["tests/test_proof.py"],
    ),
    Mutant(
        "take an owner's interruption for proof that it is finished",
        [
            Edit(
                "safeact/_protocol.py",
                "PROOF = frozenset({DoubtReason.CRASHED})",
                "PROOF = frozenset({DoubtReason.CRASHED, DoubtReason.INTERRUPTED})",
            )
        ],
        ["tests/test_protocol.py", "tests/test_proof.py"],
    ),
    Mutant(
        "settle a key on an old read, though its owner is alive again",
        [
            Edit(
                "safeact/_transitions.py",
                SETTLE_RECHECK,
                SETTLE_RECHECK.replace("if reason is None", "if False"),
            )
        ],
        ["tests/test_ledger.py", "tests/test_proof.py"],
    ),
    Mutant(
        "take a process hidden from /proc for a dead one",
        [
            Edit(
                "safeact/_owner.py",
                "    if started is None:\n        ended = _no_such_process(owner.pid)\n",
                "    if started is None:\n        ended = True\n",
            )
        ],
        ["tests/test_owner.py"],
    ),
    Mutant(
        "judge an owner in another PID namespace by a process id of ours",
        [
            Edit(
                "safeact/_owner.py",
                "    if not owner.pid_namespace or owner.pid_namespace != here.pid_namespace"
                " or not owner.group:\n",
                "    if not owner.group:\n",
            )
        ],
        ["tests/test_owner.py"],
    ),
    Mutant(
        "count a saga step in doubt as rolled back",
        [
            Edit(
                "safeact/_saga_run.py",
                'report["unresolved"].append(key)',
                "pass  # nobody knows: nothing to undo",
            )
        ],
        ["tests/test_saga_in_doubt.py"],
    ),
    Mutant(
        "complete a saga whose re-run did not reach a recorded step",
        [
            Edit(
                "safeact/_saga_run.py",
                "if self.next_index < len(self.recorded):",
                "if self.next_index < len(self.completed):",
            )
        ],
        ["tests/test_saga_in_doubt.py"],
    ),
    Mutant(
        "call a step in doubt while a saga's rollback is taken up again",
        [
            Edit(
                "safeact/_saga_run.py",
                "return record is not None and record.state in (State.SUCCEEDED, State.FAILED)",
                "return record is not None and record.state is not State.RELEASED",
            )
        ],
        ["tests/test_saga_in_doubt.py"],
    ),
    Mutant(
        "claim with the server's synchronous_commit",
        [
            Edit(
                "safeact/_postgres.py",
                '_SYNCED = "SET LOCAL synchronous_commit = on"',
                '_SYNCED = "SET LOCAL synchronous_commit = DEFAULT"',
            )
        ],
        ["tests/test_postgres_liveness.py"],
        "",
    ),
    Mutant(
        "let a role's idle timeout end the liveness session",
        [Edit("safeact/_postgres.py", "    ('idle_session_timeout', '0'),\n", "")],
        ["tests/test_postgres_liveness.py"],
        "",
    ),
    Mutant(
        "never take a lost liveness lock back",
        [
            Edit(
                "safeact/_postgres.py",
                "return self._keep(dsn, database, lock, wait=False)",
                "return False",
            )
        ],
        ["tests/test_postgres_liveness.py"],
        "",
    ),
    Mutant(
        "postgres: gone while the liveness lock is held",
        [
            Edit(
                "safeact/_postgres.py",
                "return super()._owner_gone(record) and self._owner_lost(record.owner)",
                "return super()._owner_gone(record)",
            )
        ],
        ["tests/test_postgres_proof.py"],
        "",
    ),
    Mutant(
        "quote an unstorable result with its own repr, after the action ran",
        [
            Edit(
                "safeact/_codec.py",
                'f"{_show(value)} does not fit {_show_type(return_type)}: "\n'
                '            f"it would replay as {_show(rebuilt)}"',
                'f"{value!r} does not fit {return_type!r}: it would replay as {rebuilt!r}"',
            )
        ],
        ["tests/test_after_the_action.py"],
    ),
    Mutant(
        "store a result that would replay as another value (a subclass as its base)",
        [Edit("safeact/_codec.py", "    if lost is not None:\n", "    if False:\n")],
        ["tests/test_exact_replay.py"],
    ),
    Mutant(
        "accept a return type with Any inside when the tool is made",
        [Edit("safeact/_codec.py", "    if refused is not None:\n", "    if False:\n")],
        ["tests/test_exact_replay.py"],
    ),
    Mutant(
        "hash an int subclass as its base",
        [
            Edit(
                "safeact/_keys.py",
                "_TYPED_INT = _typed(_int, int.__int__)",
                "_TYPED_INT = _int",
            )
        ],
        ["tests/test_args_hash_types.py"],
    ),
    Mutant(
        "trust every digest of the former formula",
        [Edit("safeact/_keys.py", "    if proven or rule.outdated:\n", "    if True:\n")],
        ["tests/test_args_hash_types.py"],
    ),
    Mutant(
        "replay a stored result that cattrs converted",
        [
            Edit(
                "safeact/_codec.py",
                "    if not same:\n        raise refused(",
                "    if False:\n        raise refused(",
            )
        ],
        ["tests/test_replay.py"],
    ),
    Mutant(
        "hash an argument it cannot compare by its type's name",
        [
            Edit(
                "safeact/_keys.py",
                '        return ["url", type(value).__qualname__, str(value)]\n    raise _Refused(',
                '        return ["url", type(value).__qualname__, str(value)]\n'
                '    return ["opaque", _type_name(type(value))]\n    raise _Refused(',
            )
        ],
        ["tests/test_args_hash.py"],
    ),
    Mutant(
        "amend a result the action itself returned",
        [Edit("safeact/_protocol.py", "    if not decided:\n", "    if False:\n")],
        ["tests/test_operator_results.py"],
    ),
    Mutant(
        "store an operator's --result unchecked where the tool recorded its return type",
        [
            Edit(
                "safeact/_result_fit.py",
                '    fit = check(shape, cast("JSON", result))\n',
                '    fit = check({"type": "any"}, cast("JSON", result))\n',
            )
        ],
        ["tests/test_operator_results.py"],
    ),
    Mutant(
        "write a tool's return type only for the first tool of a store",
        [
            Edit(
                "safeact/_transitions.py",
                "self._shapes.get(tool) != shape else None",
                "not self._shapes else None",
            )
        ],
        ["tests/test_result_shapes.py"],
    ),
    Mutant(
        "run an MCP tool that was called without a key",
        [
            Edit(
                "safeact/mcp.py",
                "            return _error(self._no_key(sent))\n",
                '            key = f"unkeyed:{id(arguments)}"\n',
            )
        ],
        ["tests/test_mcp.py"],
    ),
    Mutant(
        "key a LangGraph call by its step, which a model asked again moves",
        [
            Edit(
                "safeact/langgraph.py",
                THREAD_KEY,
                THREAD_KEY.replace(
                    "{_thread(call)}:",
                    (
                        "{_thread(call)}:{var_child_runnable_config.get()['metadata']['langgraph_step']}:"
                    ),
                ),
            )
        ],
        ["tests/test_langgraph.py"],
    ),
    Mutant(
        "count identical calls in a run, so a model asked again or a host's retry acts again",
        [Edit("safeact/_keyed.py", RUN_KEY, "return each_call(call)")],
        ["tests/test_keyed.py", "tests/test_openai_agents.py", "tests/test_mcp.py"],
    ),
    Mutant(
        "raise a result the ledger cannot store out of the framework, after the action ran",
        [
            Edit(
                "safeact/_keyed.py",
                "    except ResultNotStorableError:\n        return shown(value)",
                "    except ResultNotStorableError:\n        raise",
            ),
            Edit(
                "safeact/pydantic_ai.py",
                "    except ResultNotStorableError:\n        return shown(value)",
                "    except ResultNotStorableError:\n        raise",
            ),
        ],
        ["tests/test_openai_agents.py", "tests/test_langgraph.py", "tests/test_pydantic_ai.py"],
    ),
    Mutant(
        "end a LangGraph run on a key conflict, the model never told",
        [
            Edit(
                "safeact/langgraph.py",
                "        return ToolException(conflict_text(conflict, self.name))",
                "        raise conflict",
            )
        ],
        ["tests/test_langgraph.py"],
    ),
    Mutant(
        "pause again after a refused verdict without saying why",
        [
            Edit(
                "safeact/langgraph.py",
                "why this verdict was refused.\n"
                '                return pauses, f"the verdict was not applied: {exc}"',
                "why this verdict was refused.\n                return pauses, None",
            )
        ],
        ["tests/test_langgraph.py"],
    ),
    Mutant(
        "hash an argument equal to its default, so a deploy that adds a parameter moves keys",
        [
            Edit(
                "safeact/_keys.py",
                "texts[parameter.name] = _text(parameter.name, default)",
                "texts[parameter.name] = None",
            )
        ],
        ["tests/test_keyed.py", "tests/test_args_hash.py"],
    ),
    Mutant(
        "key a DBOS step by the process running it, which recovery replaces",
        [
            Edit(
                "safeact/dbos.py",
                "from collections.abc import",
                "import os\nfrom collections.abc import",
            ),
            Edit("safeact/dbos.py", DBOS_KEY, DBOS_KEY.replace('}"', '}:{os.getpid()}"')),
        ],
        ["tests/test_dbos.py"],
    ),
    Mutant(
        "key a Temporal activity by its attempt, which every retry changes",
        [
            Edit(
                "safeact/temporal.py",
                TEMPORAL_KEY,
                TEMPORAL_KEY.replace(":{call.tool}", ":{info.attempt}:{call.tool}"),
            )
        ],
        ["tests/test_temporal.py"],
    ),
    Mutant(
        "key a Temporal activity by its workflow run, which an operator's re-run changes",
        [
            Edit(
                "safeact/temporal.py",
                TEMPORAL_KEY,
                TEMPORAL_KEY.replace(":{call.tool}", ":{info.workflow_run_id}:{call.tool}"),
            )
        ],
        ["tests/test_temporal.py", "tests/test_temporal_server.py"],
    ),
    Mutant(
        "key a DBOS step by its step id, which a deploy that inserts a step moves",
        [
            Edit(
                "safeact/dbos.py",
                DBOS_KEY,
                DBOS_KEY.replace(":{call.tool}", ":{step_id}:{call.tool}"),
            )
        ],
        ["tests/test_dbos.py"],
    ),
    Mutant(
        "key an Agents SDK call by its tool_call_id, which a model asked again changes",
        [
            Edit(
                "safeact/openai_agents.py", "    KeyPolicy,\n", "    KeyPolicy,\n    run_scope,\n"
            ),
            Edit("safeact/openai_agents.py", AGENTS_TOOL, AGENTS_BY_CALL_ID),
        ],
        ["tests/test_openai_agents.py"],
    ),
    Mutant(
        "let the Agents SDK turn a stop on doubt into an error the model may retry",
        [
            Edit(
                "safeact/openai_agents.py",
                "failure_error_function=_failure,",
                "failure_error_function=agents.default_tool_error_function,",
            )
        ],
        ["tests/test_openai_agents.py"],
    ),
    Mutant(
        "key a plain pydantic-ai run by its own run_id, new on every run",
        [
            Edit(
                "safeact/pydantic_ai.py",
                "    if ctx is not None and _durable(ctx):",
                "    if ctx is not None:",
            )
        ],
        ["tests/test_pydantic_ai.py"],
    ),
    Mutant(
        "read a corrupt result as null",
        [
            Edit(
                "safeact/_rows.py",
                'raise _Unreadable(column, f"is not valid JSON ({exc})") from None',
                "return None",
            )
        ],
        ["tests/test_corrupt_rows.py"],
    ),
    Mutant(
        "leave a key whose outcome could not be written looking busy",
        [Edit("safeact/_tool.py", "            self._unrecorded(record, state, exc)\n", "")],
        ["tests/test_recorded.py", "tests/test_state_machine.py"],
    ),
    Mutant(
        "judge a reboot from the boot id alone",
        [
            Edit(
                "safeact/_owner.py",
                "        return (\n"
                "            owner.machine_id.startswith(_IDENTITY_PREFIX)\n"
                "            and owner.machine_id == here.machine_id\n"
                "            and _booted_after(alive_until)\n"
                "        )\n",
                "        return True\n",
            )
        ],
        ["tests/test_owner.py", "tests/test_proof_across.py"],
    ),
    Mutant(
        "take an owner for gone while a child its action started runs",
        [
            Edit(
                "safeact/_owner.py",
                "    return ended and not _group_runs(owner, here)\n",
                "    return ended\n",
            )
        ],
        ["tests/test_owner.py", "tests/test_proof_across.py"],
    ),
    Mutant(
        "take a zombie leader whose other threads run for gone",
        [
            Edit(
                "safeact/_owner.py",
                '    if fields[0] in {"Z", "X"} and not _threads_run(pid):\n',
                '    if fields[0] in {"Z", "X"}:\n',
            )
        ],
        ["tests/test_owner.py", "tests/test_proof_across.py"],
    ),
    Mutant(
        "read start times as a time namespace shifts them",
        [
            Edit(
                "safeact/_owner.py",
                "    return ticks - _boottime_offset()[1]\n",
                "    return ticks\n",
            )
        ],
        ["tests/test_owner.py", "tests/test_proof_across.py"],
    ),
    Mutant(
        "act without renewing the lease",
        [
            Edit(
                "safeact/_liveness.py",
                "            self._held[record.key, record.attempt_id] = None\n",
                "",
            )
        ],
        ["tests/test_liveness.py"],
    ),
    Mutant(
        "resolve a reviewed key at whatever attempt holds it now",
        [
            Edit(
                "safeact/_cli_batch.py",
                "                attempt_id=record.attempt_id,\n",
                "                attempt_id=None,\n",
            )
        ],
        ["tests/test_cli_batch.py"],
    ),
    Mutant(
        "apply a reviewed set whose check refused an item",
        [
            Edit(
                "safeact/_cli.py",
                "    if refused is not None or options.dry_run:\n",
                "    if options.dry_run:\n",
            )
        ],
        ["tests/test_cli_batch.py"],
    ),
    Mutant(
        "tell a saga's ledger from its tools' by how its path is spelt",
        [
            Edit(
                "safeact/_saga.py",
                "        return one._id == other._id  # noqa: SLF001",
                "        return one.location == other.location  # noqa: SLF001",
            )
        ],
        ["tests/test_saga.py"],
    ),
    Mutant(
        "report nothing for a healthy ledger's tools",
        [
            Edit(
                "safeact/otel.py",
                "        counts = dict.fromkeys({*known, *_seen.get(store, ())}, 0)",
                "        counts: dict[str, int] = {}",
            )
        ],
        ["tests/test_telemetry.py"],
    ),
    Mutant(
        "approval not consumed with the claim",
        [
            # The claim still requires an APPROVED approval, but leaves it APPROVED: once its
            # attempt is released, the old yes would authorize the next attempt too.
            Edit(
                "safeact/_transitions.py",
                "            ApprovalState.CONSUMED.value,\n            attempt_id,\n",
                "            ApprovalState.APPROVED.value,\n            attempt_id,\n",
            )
        ],
        # test_approval_crash (a release after a kill asks again) and the approval state
        # machine see it too, in 15 to 40 s more.
        ["tests/test_approval.py"],
    ),
    Mutant(
        "approval not bound to the digest",
        [
            # Both locks: the gate's comparison, and the claim's statement, which consumes
            # only an approval of the claim's own digest (either alone keeps the guarantee).
            Edit(
                "safeact/_protocol.py",
                "    if approval.tool != tool or approval.args_hash != args_hash:\n",
                "    if approval.tool != tool:\n",
            ),
            Edit(
                "safeact/_transitions.py",
                '        "WHERE key = ? AND tool = ? AND args_hash = ? AND state = ?",\n',
                '        "WHERE key = ? AND tool = ? AND ? IS NOT NULL AND state = ?",\n',
            ),
        ],
        # test_approval_crash and the approval state machine see it too.
        ["tests/test_approval.py"],
    ),
    Mutant(
        "let the crash harness pass a call that acted twice",
        [Edit("safeact/_crash.py", "    if most > made:", "    if most < made:")],
        ["tests/test_crash_harness.py"],
    ),
    Mutant(
        "never kill the crash harness's runs",
        [
            Edit(
                "safeact/_crash.py",
                "            if crash is not None and (point, counts[point]) == tuple(crash):",
                "            if crash is not None and (point, counts[point]) == ():",
            )
        ],
        ["tests/test_crash_harness.py"],
    ),
    Mutant(
        "resolve every doubt the crash harness meets as not happened",
        [
            Edit(
                "safeact/_crash.py",
                "happened=crash.point in AFTER_THE_EFFECT)",
                "happened=False)",
            )
        ],
        ["tests/test_crash_harness.py"],
    ),
    Mutant(
        "let the inbox take a POST without the session's anti-forgery token",
        [
            Edit(
                "safeact/_web_auth.py",
                "        and hmac.compare_digest(expected.encode(), given.encode())",
                "        or True",
            )
        ],
        ["tests/test_inbox.py"],
    ),
    Mutant(
        "let the inbox take a POST from another site",
        [
            Edit(
                "safeact/_web_auth.py",
                "    return origin is None or origin == own",
                "    return True",
            )
        ],
        ["tests/test_inbox.py"],
    ),
    Mutant(
        "keep an inbox session past its minutes",
        [
            Edit(
                "safeact/_web.py",
                "return name if self.inbox.clock() < until else None",
                "return name",
            )
        ],
        ["tests/test_inbox.py"],
    ),
    Mutant(
        "draw the inbox's pages without escaping",
        [Edit("safeact/_web.py", "        autoescape=True,", "        autoescape=False,")],
        ["tests/test_inbox.py", "tests/test_inbox_browser.py"],
    ),
    Mutant(
        "resolve in the inbox whatever attempt the page showed",
        [Edit("safeact/_web.py", "attempt_id=attempt,", "attempt_id=None,")],
        ["tests/test_inbox.py"],
    ),
    Mutant(
        "decide an approval in the inbox whatever state the page showed",
        [
            Edit(
                "safeact/_web.py",
                "                    seen=seen,\n",
                "                    seen=None,\n",
            )
        ],
        ["tests/test_inbox.py"],
    ),
    Mutant(
        "take a result in the inbox without checking it against the return type",
        [
            Edit(
                "safeact/_web.py",
                "await run_in_threadpool(result_fit, self.store, record, result)",
                "(None, None)",
            )
        ],
        ["tests/test_inbox.py"],
    ),
    Mutant(
        "leave abandoned attempts out of the inbox's count",
        [Edit("safeact/_inbox.py", "int(count) + len(abandoned)", "int(count)")],
        ["tests/test_inbox.py"],
    ),
    Mutant(
        "let a copy of a signed-out session's cookie back into the inbox",
        [Edit("safeact/_web.py", 'if request.session.get("sid") in self.ended:', "if False:")],
        ["tests/test_inbox.py"],
    ),
    Mutant(
        "refuse the inbox's own forms behind a TLS proxy",
        [
            Edit(
                "safeact/_web.py",
                'scheme = "https" if self.inbox.secure_cookies else request.url.scheme',
                "scheme = request.url.scheme",
            )
        ],
        ["tests/test_inbox.py"],
    ),
    Mutant(
        "resolve in the inbox a form that names no attempt",
        [
            Edit("safeact/_web.py", "    if not attempt:\n", "    if False:\n"),
            Edit("safeact/_web.py", "attempt_id=attempt,", "attempt_id=attempt or None,"),
        ],
        ["tests/test_inbox.py"],
    ),
    Mutant(
        "show an empty page past the last in the inbox",
        [Edit("safeact/_web.py", "if doubts.offset and not doubts.items:", "if False:")],
        ["tests/test_inbox.py"],
    ),
    Mutant(
        "keep quiet in the inbox about a result that was not checked",
        [Edit("safeact/_web.py", "        if unchecked is not None:", "        if False:")],
        ["tests/test_inbox.py"],
    ),
    Mutant(
        "check the same rows again in each batch",
        [
            Edit(
                "safeact/_integrity.py",
                "            after = rows[-1][-1]",
                "            after = rows[0][-1]",
            )
        ],
        ["tests/test_check.py"],
    ),
    Mutant(
        "let check pass a row it cannot read",
        [
            Edit(
                "safeact/_integrity.py",
                "            yield Batch(table, len(rows), corrupt)",
                "            yield Batch(table, len(rows), ())",
            )
        ],
        ["tests/test_check.py"],
    ),
    Mutant(
        "purge every key in one transaction, whatever the batch",
        [
            Edit(
                "safeact/_retention.py",
                "        for candidates in self._candidates(keys, batch):",
                "        for candidates in self._candidates(keys, MOST):",
            )
        ],
        ["tests/test_purge_batches.py"],
    ),
    Mutant(
        "purge a saga's steps before the saga",
        [
            Edit(
                "safeact/_retention.py",
                (
                    "        for candidates in self._candidates(sagas, batch):\n"
                    "            with self._batch(dry_run=dry_run) as db:\n"
                    "                finished = self._purgeable_sagas(db, candidates, cutoff)\n"
                    "                if not dry_run:\n"
                    "                    self._remove(db, [], finished)\n"
                    '                    checkpoint("purging")\n'
                    "            yield Purged(keys=(), sagas=tuple(saga for saga, _ in finished))\n"
                    "        for candidates in self._candidates(keys, batch):\n"
                    "            with self._batch(dry_run=dry_run) as db:\n"
                    "                found = self._purgeable_keys(db, candidates, values, cutoff)\n"
                    "                if not dry_run:\n"
                    "                    self._remove(db, found, [])\n"
                    '                    checkpoint("purging")\n'
                    "            yield Purged(keys=tuple(key for key, _, _ in found), sagas=())\n"
                ),
                (
                    "        for candidates in self._candidates(keys, batch):\n"
                    "            with self._batch(dry_run=dry_run) as db:\n"
                    "                found = self._purgeable_keys(db, candidates, values, cutoff)\n"
                    "                if not dry_run:\n"
                    "                    self._remove(db, found, [])\n"
                    '                    checkpoint("purging")\n'
                    "            yield Purged(keys=tuple(key for key, _, _ in found), sagas=())\n"
                    "        for candidates in self._candidates(sagas, batch):\n"
                    "            with self._batch(dry_run=dry_run) as db:\n"
                    "                finished = self._purgeable_sagas(db, candidates, cutoff)\n"
                    "                if not dry_run:\n"
                    "                    self._remove(db, [], finished)\n"
                    '                    checkpoint("purging")\n'
                    "            yield Purged(keys=(), sagas=tuple(saga for saga, _ in finished))\n"
                ),
            )
        ],
        ["tests/test_purge_batches.py"],
    ),
    Mutant(
        "let doubt read every key again",
        [
            Edit(
                "safeact/_cli.py",
                "    found = store.scan_records(unsettled=True)\n    corrupt = [",
                "    found = store.scan_records()\n    corrupt = [",
            )
        ],
        ["tests/test_corrupt_rows.py"],
    ),
    Mutant(
        "write the lines of a stopped archive's batch again",
        [
            Edit(
                "safeact/_archive.py",
                "            written = _tail(file.fileno(), _MOST)",
                "            written: frozenset[str] = frozenset()",
            )
        ],
        ["tests/test_archive.py"],
    ),
    Mutant(
        "stream ls in key order, not oldest attempt first",
        [
            Edit(
                "safeact/_listing.py",
                'ORDER BY attempted_at, key",  # noqa: S608 - constants\n'
                "            parameters,\n            batch,",
                'ORDER BY key",  # noqa: S608 - constants\n'
                "            parameters,\n            batch,",
            )
        ],
        ["tests/test_listing.py", "tests/test_cli.py"],
    ),
    Mutant(
        "ask about an owner once per lease in a listing",
        [
            Edit(
                "safeact/_ledger.py",
                "            asked = (record.owner, None if this_boot else record.lease_until)",
                "            asked = (record.owner, record.lease_until)",
            )
        ],
        ["tests/test_listing.py"],
    ),
    Mutant(
        "judge an owner of another boot once whatever its keys' leases",
        [
            Edit(
                "safeact/_ledger.py",
                "            asked = (record.owner, None if this_boot else record.lease_until)",
                "            asked = (record.owner, None)",
            )
        ],
        ["tests/test_listing.py"],
    ),
    Mutant(
        "keep a settled key counted after it leaves its state",
        [Edit("safeact/_tables.py", 'f"BEGIN {leave}; {enter}; END"', 'f"BEGIN {enter}; END"')],
        ["tests/test_listing.py"],
    ),
    Mutant(
        "keep a purged key counted",
        [
            Edit(
                "safeact/_tables.py",
                "values='VALUES (OLD.tool, OLD.state, 0, -1)'",
                "values='VALUES (OLD.tool, OLD.state, 0, 0)'",
            )
        ],
        ["tests/test_listing.py"],
    ),
    Mutant(
        "postgres: keep a settled key counted after it leaves its state",
        [
            Edit(
                "safeact/_tables.py",
                "f\"IF TG_OP <> 'INSERT' AND OLD.{settled} THEN\\n{leave};\\nEND IF;\\n\"",
                'f"IF FALSE THEN\\n{leave};\\nEND IF;\\n"',
            )
        ],
        ["tests/test_listing.py"],
        "postgres",
    ),
    Mutant(
        "migrate to schema 7 without counting the keys of before",
        [Edit("safeact/_schema.py", COUNT_OF_BEFORE, "")],
        ["tests/test_migrate.py"],
    ),
    Mutant(
        "postgres: count the keys of before, then create the counting trigger",
        [
            Edit("safeact/_postgres.py", COUNT_OF_BEFORE, ""),
            Edit("safeact/_postgres.py", COUNTING_FUNCTION, COUNT_OF_BEFORE + COUNTING_FUNCTION),
        ],
        ["tests/test_migrate.py"],
        "settled_while_it_runs",
    ),
    Mutant(
        "count no person's decision in the metrics",
        [Edit("safeact/_telemetry.py", "    otel.decisions.add(1, counted)", "    del counted")],
        ["tests/test_telemetry.py"],
    ),
]


class Result(NamedTuple):
    name: str
    red: int
    ran: int


class Run(NamedTuple):
    red: list[str]
    """The red tests (their pytest ids), ["hung"] if the run hung."""
    ran: int
    collected: bool
    """False if a test file could not be imported: an edit that breaks an import proves nothing."""


AT_ONCE = 2
"""Mutants run at once: CI has two cores."""

RED_LOG = "SAFEACT_MUTANTS_RED_LOG"
"""The file run_tests' pytest writes each red test's id to, through ``pytest_runtest_logreport``."""

# Plugins that none of these tests use, which cost seconds at every start of pytest
# (langsmith's, installed with LangChain, about 3 s alone); a mutant starts pytest once.
UNUSED_PLUGINS = ("langsmith_plugin", "pytest_cov", "pytest-mypy-plugins", "returns")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Write the id of a red test to RED_LOG: run_tests loads this module as pytest's plugin.

    Its exact id, to run it again on the unmutated copy: the summary line pytest prints
    cannot be split from the message after it.
    """
    _write_red(report)


def pytest_collectreport(report: pytest.CollectReport) -> None:
    """Write the path of a test file that could not be collected to RED_LOG, as a red test."""
    _write_red(report)


def _write_red(report: pytest.TestReport | pytest.CollectReport) -> None:
    if report.failed and RED_LOG in os.environ:
        with Path(os.environ[RED_LOG]).open("a") as log:
            log.write(f"{report.nodeid}\n")


def run_tests(copy: Path, tests: list[str], select: str, *, every: bool, workers: int = 1) -> Run:
    """Run ``tests`` (``-k select``) against ``copy``: all, or (not ``every``) up to a red one.

    ``workers``: xdist's, for a run of many tests with no other run beside it.
    """
    log = copy.with_name(f"{copy.name}.red.log")
    log.unlink(missing_ok=True)
    env = {**os.environ, "PYTHONPATH": str(copy), "CI": "1", RED_LOG: str(log)}
    try:
        completed = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                "-p",
                "tests.mutants",
                "-o",
                "addopts=",
                *[option for plugin in UNUSED_PLUGINS for option in ("-p", f"no:{plugin}")],
                *([] if every else ["--maxfail=1"]),
                *(["-n", str(workers)] if workers > 1 else []),
                *(["-k", select] if select else []),
                *tests,
            ],
            cwd=copy,
            env=env,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=600,
            check=False,
            # A group of its own, as each of xdist's workers has (tests/conftest.py): an owner's
            # end includes its group's later processes, and two mutants run at once.
            start_new_session=True,
        )
    except subprocess.TimeoutExpired:
        return Run(["hung"], 1, collected=True)  # caught too (like mutmut's time-out)

    counts = dict.fromkeys(("passed", "failed", "error"), 0)
    for number, word in re.findall(r"(\d+) (passed|failed|error)", completed.stdout):
        counts[word] = int(number)
    # dict: a test red in its call and in its teardown is one red test
    red = list(dict.fromkeys(log.read_text().splitlines())) if log.exists() else []
    collected = "during collection" not in completed.stdout
    # An internal or a usage error (a red test's id not found again, say) is not a test going
    # red; an interrupted run is, with the tests that went red before it (an escaped
    # KeyboardInterrupt, a crash simulated in-process, stops pytest).
    if completed.returncode in (pytest.ExitCode.INTERNAL_ERROR, pytest.ExitCode.USAGE_ERROR):
        raise SystemExit(f"pytest {' '.join(tests)} failed:\n{completed.stdout[-2000:]}")
    return Run(red, sum(counts.values()), collected)


def copy_project(into: Path) -> Path:
    copy = into / "project"
    ignore = shutil.ignore_patterns(".venv*", ".git", "*_cache", "__pycache__", ".hypothesis")
    shutil.copytree(ROOT, copy, ignore=ignore)
    return copy


def mutate(copy: Path, mutant: Mutant) -> None:
    for edit in mutant.edits:
        path = copy / edit.path
        path.write_text(check_pattern(copy, mutant, edit).replace(edit.old, edit.new))


def check_pattern(copy: Path, mutant: Mutant, edit: Edit) -> str:
    """The text of ``edit``'s file in ``copy``; stop the run if ``edit.old`` is not there once."""
    text = (copy / edit.path).read_text()
    if text.count(edit.old) != 1:
        raise SystemExit(f"mutant {mutant.name!r}: its pattern is gone from {edit.path}")
    return text


def run_all(mutants: list[Mutant], *, every: bool) -> list[Result]:
    results = []
    red: set[str] = set()
    hung: list[Mutant] = []
    with tempfile.TemporaryDirectory() as scratch:
        pristine = copy_project(Path(scratch))
        for mutant in mutants:  # every pattern, before minutes are spent on the first mutants
            for edit in mutant.edits:
                check_pattern(pristine, mutant, edit)

        # Most of a mutant's run is pytest starting and child processes waiting: two at once
        # fill CI's two cores. Results come back in the mutants' order.
        with concurrent.futures.ThreadPoolExecutor(max_workers=AT_ONCE) as pool:
            runs = pool.map(
                functools.partial(run_mutant, pristine, every=every), enumerate(mutants)
            )
            for mutant, (run, took) in zip(mutants, runs, strict=True):
                results.append(Result(mutant.name, len(run.red), run.ran))
                report(mutant, run, took)
                if run.red == ["hung"]:
                    hung.append(mutant)
                else:
                    red.update(run.red)
        # A red test proves a mutant only if it is green without it. Only the tests that went
        # red run again, unmutated: the whole of every mutant's files would cost minutes.
        started = time.monotonic()
        checks = [run_tests(pristine, sorted(red), "", every=True, workers=AT_ONCE)] if red else []
        checks += [run_tests(pristine, m.tests, m.select, every=True) for m in hung]
        for check in checks:
            if check.red or not check.ran or not check.collected:
                raise SystemExit(
                    f"red on the unmutated copy too, so it proves nothing: "
                    f"{', '.join(check.red) or 'no test ran'}; fix it first"
                )
        if red:
            took = time.monotonic() - started
            print(f"the red tests, run again unmutated: all {len(red)} pass ({took:.0f}s)")
    return results


def run_mutant(pristine: Path, numbered: tuple[int, Mutant], *, every: bool) -> tuple[Run, float]:
    """Run the tests of mutant ``numbered`` on a mutated copy of ``pristine``, and their time."""
    index, mutant = numbered
    copy = pristine.with_name(f"mutant-{index}")
    shutil.copytree(pristine, copy)
    mutate(copy, mutant)
    started = time.monotonic()
    run = run_tests(copy, mutant.tests, mutant.select, every=every)
    took = time.monotonic() - started
    shutil.rmtree(copy, ignore_errors=True)
    if not run.collected:
        raise SystemExit(f"mutant {mutant.name!r}: {' '.join(run.red)} no longer imports")
    return run, took


def report(mutant: Mutant, run: Run, took: float) -> None:
    verdict = "killed" if run.red else "SURVIVED"
    print(f"{verdict:9}{took:4.0f}s {len(run.red):3} of {run.ran:3} red  {mutant.name}", flush=True)
    if run.red:
        print(f"{'':17}first red: {run.red[0]}", flush=True)


def table(results: list[Result]) -> str:
    lines = ["| break this guarantee | tests that go red |", "|---|---|"]
    lines += [f"| {r.name} | {r.red} of {r.ran} |" for r in results]
    return "\n".join(lines)


def update_docs(results: list[Result]) -> None:
    page = ROOT / "docs" / "proof.md"
    text = page.read_text()
    block = f"<!-- mutants:start -->\n{table(results)}\n<!-- mutants:end -->"
    updated, count = re.subn(
        r"<!-- mutants:start -->.*<!-- mutants:end -->", block, text, flags=re.DOTALL
    )
    if count != 1:
        raise SystemExit(f"{page} has no <!-- mutants:start --> ... <!-- mutants:end --> block")
    page.write_text(updated)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--update-docs", action="store_true")
    parser.add_argument("--only", metavar="TEXT", help="run the mutants whose name contains TEXT")
    options = parser.parse_args()
    chosen = [m for m in MUTANTS if options.only is None or options.only in m.name]
    if not chosen:
        raise SystemExit(f"no mutant's name contains {options.only!r}")
    if options.update_docs and len(chosen) < len(MUTANTS):
        raise SystemExit("--update-docs needs every mutant: leave out --only")
    results = run_all(chosen, every=options.update_docs)
    if options.update_docs:
        update_docs(results)
    survivors = [r.name for r in results if not r.red]
    print(f"{len(results) - len(survivors)} of {len(results)} mutants killed")
    if survivors:
        raise SystemExit(f"survived: {', '.join(survivors)}")


if __name__ == "__main__":
    main()
