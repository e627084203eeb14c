"""The CLI group loads each command from its module when it runs: the group's map and the
modules' ``COMMANDS`` must name the same commands, or a command would be missing."""

from __future__ import annotations

import importlib
import pkgutil

import click

from webhook_app import cli


def defined() -> dict[str, str]:
    """Each command a module of ``webhook_app.cli`` defines, and that module's name."""
    found: dict[str, str] = {}
    for info in pkgutil.iter_modules(cli.__path__):
        module = importlib.import_module(f"{cli.__name__}.{info.name}")
        for command in getattr(module, "COMMANDS", ()):
            assert isinstance(command, click.Command) and command.name
            found[command.name] = info.name
    return found


def test_every_command_of_every_module_is_in_the_group() -> None:
    assert defined() == cli.COMMANDS


def test_the_group_finds_each_command() -> None:
    ctx = click.Context(cli.main)
    assert cli.main.list_commands(ctx) == sorted(defined())
    for name in cli.main.list_commands(ctx):
        command = cli.main.get_command(ctx, name)
        assert command is not None and command.name == name
    assert cli.main.get_command(ctx, "no-such-command") is None
