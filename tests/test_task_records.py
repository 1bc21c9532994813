"""Each per-task fact stands once, in ``tasks.TASKS``: a ninth task is one more record there, and the
published results' task list and headers, the MTEB names, the instructions, the rewrite prompts and the
transcription script all have it without another edit."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from r2med_core.tasks import TASKS, Family, family_stand_in

ROOT = Path(__file__).resolve().parent.parent

#: Added to TASKS before anything else reads it, in a fresh interpreter (module tables are built on import).
NINTH = textwrap.dedent(
    """
    import dataclasses, importlib.util, json
    from r2med_core import tasks

    ninth = dataclasses.replace(
        tasks.TASKS["PMC-Clinical"], name="Ninth-Task", header="Ninth", first_commit_name="NinthOld",
        family_stand_in=False,
    )
    tasks.TASKS["Ninth-Task"] = ninth

    from r2med_core.analysis import mteb_names, published
    from r2med_core.llm import prompts

    spec = importlib.util.spec_from_file_location("transcribe", "scripts/transcribe_published.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    examples = prompts.load_examples(json.dumps({"Ninth-Task": "EX"}).encode(), "examples.json", 1 << 20)
    print(json.dumps({
        "published": published.PUBLISHED_TASKS[-1],
        "header": published.TASK_HEADERS["Ninth-Task"],
        "help": published.task_help("Ninth-Task"),
        "mteb": mteb_names.MTEB_TASK_NAMES["Ninth-Task"],
        "from_mteb": mteb_names.task_from_mteb("R2MEDNinthTaskRetrieval"),
        "instructions": tasks.task_instructions("Ninth-Task") == ninth.instructions,
        "get_task": tasks.get_task("ninth-task").name,
        "official_task": prompts.official_task("Ninth-Task", None),
        "prompt": prompts.official_user_prompt("hyde", "Q", "Ninth-Task"),
        "examples": prompts.Prompts(examples=examples).examples_for("Ninth-Task"),
        "script": [script.TASKS[-1], script.FIRST_COMMIT_DATASETS["Ninth-Task"]],
    }))
    """
)


def test_a_ninth_task_is_one_record() -> None:
    done = subprocess.run(
        [sys.executable, "-c", NINTH], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr

    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == {
        "published": "Ninth-Task",
        "header": "Ninth",
        "help": "Ninth-Task: PubMed Central case reports, 114 queries, 60,406 documents.",
        "mteb": "R2MEDNinthTaskRetrieval",
        "from_mteb": "Ninth-Task",
        "instructions": True,
        "get_task": "Ninth-Task",
        "official_task": ["Ninth-Task", True],
        "prompt": "Please write a similar case to help diagnose the Clinical Case.\nCase: Q\nSimilar Case: ",
        "examples": "EX",
        "script": ["Ninth-Task", "NinthOld"],
    }


def test_each_family_has_one_task_whose_prompts_stand_in() -> None:
    stand_ins = [info for info in TASKS.values() if info.family_stand_in]
    assert sorted(info.family for info in stand_ins) == sorted(Family)
    assert [family_stand_in(f).name for f in (*Family, None)] == [
        "Medical-Sciences",
        "MedQA-Diag",
        "PMC-Clinical",
        "Medical-Sciences",
    ]
