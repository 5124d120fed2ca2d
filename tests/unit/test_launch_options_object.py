"""`launch()`'s options are one object, `LaunchConfig`, shared with the command line (as torchrun's).

The old keyword arguments still work and mean the same; the command line's
parsed options are a `LaunchConfig` with the program added.
"""
from __future__ import annotations

import dataclasses
import json

import pytest

from distrib.launch import LaunchConfig, launch
from distrib.launch.cli import LaunchOptions, parse_args

#: launch()'s keyword arguments before they became one object (issue 51).
_OLD_KEYWORDS = {"workers", "chief", "ps", "evaluator", "module", "max_restarts", "env", "cwd", "timeout", "host",
                 "output", "grace_seconds", "python", "verbose", "hosts", "node_rank", "master_port", "elastic",
                 "rejoins", "start_workers", "fork_server", "output_from", "log_dir"}


def test_the_config_holds_every_option_launch_took():
    assert {f.name for f in dataclasses.fields(LaunchConfig)} == _OLD_KEYWORDS


def test_the_command_line_s_options_are_a_launch_config_with_the_program():
    opts = parse_args(["launch", "--workers", "3", "--chief", "--max-restarts", "2", "-m", "pkg.train", "--lr", "1"])
    assert isinstance(opts, LaunchOptions) and isinstance(opts, LaunchConfig)
    assert (opts.target, opts.args) == ("pkg.train", ["--lr", "1"])
    assert opts.launch_config() == LaunchConfig(workers=3, chief=True, max_restarts=2, module=True)


def test_an_unknown_option_is_named():
    with pytest.raises(TypeError, match="'wokers'"):
        launch("t.py", wokers=2)
    with pytest.raises(TypeError, match="'wokers'"):
        LaunchConfig().replace(wokers=2)


def test_a_config_and_the_old_keywords_launch_the_same_cluster(tmp_path):
    script = tmp_path / "task.py"
    script.write_text("import json, os\nprint(json.dumps(json.loads(os.environ['TF_CONFIG'])['task']))\n")
    by_keywords = launch(str(script), workers=2, chief=True, output="capture", timeout=120, output_from="all")
    config = LaunchConfig(workers=2, chief=True, output="capture", timeout=120)
    by_config = launch(str(script), config=config, output_from="all")  # a keyword overrides the config's field
    for result in (by_keywords, by_config):
        assert result.returncode == 0, result.output
        tasks = sorted(json.loads(out.strip().splitlines()[-1])["type"] + str(json.loads(
            out.strip().splitlines()[-1])["index"]) for out in result.outputs.values())
        assert tasks == ["chief0", "worker0", "worker1"]
    assert sorted(by_keywords.outputs) == sorted(by_config.outputs)
