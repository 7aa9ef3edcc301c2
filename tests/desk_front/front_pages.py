"""A project with a task for the browser tests of the desk's front, made directly in Label
Studio (``ensure_project`` / ``import_tasks``) from the emotion round's config and task data."""
from __future__ import annotations

from pipeline.annotation import ls_config
from pipeline.annotation.rounds import load_round
from tests.annotation.ls_samples import make_sample


def emotion_project(ls_client, name: str, scenario: str = "family", keys: bool = False):
    """A project of the emotion round with one task pre-filled with the round's defaults.
    ``keys``: without the config's hidden key holders, so that Label Studio gives its choices
    keys, those of the people lists (choices loaded from the task data) among them. Returns
    the project, the task id, the prediction's results and the people."""
    rnd = load_round("emotion")
    sample = make_sample(f"synthetic/desk_front_{name}", scenario, 8)
    config = ls_config.render_config(rnd, scenario)
    if keys:
        config = config.replace("\n".join(ls_config.hotkey_sink()) + "\n", "")
    data = ls_config.build_task_data(rnd, sample)
    prediction = ls_config.values_to_results(rnd, data, ls_config.default_values(rnd, sample))
    assert prediction, "the emotion round pre-fills its defaults"
    project = ls_client.ensure_project(f"rescue-test:desk-front-{name}", f"desk front {name}", config)
    [task] = ls_client.import_tasks(project.id, [{"data": data, "predictions": [{"result": prediction}]}])
    return project, task, prediction, {e["value"] for e in data["entities"]}
