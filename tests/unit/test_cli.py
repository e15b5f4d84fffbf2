"""The CLI wiring: every command resolves to a module with add_arguments and run."""

from __future__ import annotations

import argparse

import pytest

from muster import cli


@pytest.mark.parametrize("command", cli.COMMANDS, ids=lambda c: " ".join(c.words))
def test_every_command_has_help(command: cli.Command, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main([*command.words, "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert command.help in out


def test_group_without_subcommand_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["cluster"]) == 2
    assert "up" in capsys.readouterr().out


def test_unknown_option_is_an_error() -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["cluster", "up", "--no-such-flag"])
    assert exit_info.value.code == 2


def test_module_protocol() -> None:
    for command in cli.COMMANDS:
        module = cli._module(command)
        parser = argparse.ArgumentParser()
        module.add_arguments(parser)
        assert callable(module.run)
