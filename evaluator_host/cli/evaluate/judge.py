"""What an LLM judge needs on the command line: ``--secret NAME``, ``--network HOST:PORT``, ``--env NAME=VALUE``
(repeatable), on ``run``, ``test`` (a file) and ``migrate --check-with``, as the Python client's ``secrets``,
``network`` and ``settings.env``.

Contract:

* Checked before anything starts (:class:`~evaluator_host.cli.inputs.UsageError`, exit 2): a ``--network``
  entry is ``host:port`` with a DNS name, an ``--env`` entry is ``NAME=VALUE`` with a name a definition may set
  (``settings.env``'s rule), and in this process a ``--secret`` names a variable of this environment.
* In this process (no ``--server``): the private service's default workspace allows the ``--network`` hosts
  (``EVALUATOR_HOST_NETWORK_ALLOW`` besides its own entries) and holds each ``--secret`` with this
  environment's value (never printed; redacted from every answer as any secret is).
* With ``--server``: names only go over the wire; the service's workspace must hold the secrets and allow
  the hosts (its answer says which is missing).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from evaluator_host.cli.inputs import UsageError

if TYPE_CHECKING:
    from evaluator_host.evaluation.usecases import Definition
    from evaluator_host.services import Services
    from evaluator_host.settings import Settings

__all__ = ["Judge", "add_options", "given", "judge_of", "start_private", "with_judge"]


@dataclass(frozen=True)
class Judge:
    """The command line's secrets, network destinations and plain variables (empty: none given)."""

    secrets: tuple[str, ...] = ()
    network: tuple[str, ...] = ()
    env: dict[str, str] = dataclasses.field(default_factory=dict)


def add_options(parser: argparse.ArgumentParser | Any, what: str = "") -> None:
    """The three options on ``parser`` (``what``: a prefix of their help, e.g. ``PATH: ``)."""
    parser.add_argument(
        "--secret",
        action="append",
        metavar="NAME",
        help=f"{what}a secret the evaluator gets as an environment variable (in this process: this "
        "environment's value of NAME; with --server: the workspace's); repeatable",
    )
    parser.add_argument(
        "--network", action="append", metavar="HOST:PORT", help=f"{what}a host the evaluator may reach; repeatable"
    )
    parser.add_argument(
        "--env",
        action="append",
        metavar="NAME=VALUE",
        help=f"{what}a plain environment variable (settings.env, e.g. OPENAI_BASE_URL=http://llm:8080/v1); repeatable",
    )


def judge_of(args: argparse.Namespace, *, local: bool) -> Judge:
    """The options of ``args`` checked (see the module docstring); ``local``: secrets read from this environment."""
    from evaluator_host.evaluation.plain_env import check_env  # the vault's rule: not for building the parser
    from evaluator_host.tenancy.models import destination

    secrets = tuple(dict.fromkeys(getattr(args, "secret", None) or []))
    if local:
        missing = [name for name in secrets if name not in os.environ]
        if missing:
            raise UsageError(f"--secret {missing[0]}: not set in this environment (export {missing[0]}=...)")
    network: list[str] = []
    for entry in getattr(args, "network", None) or []:
        try:
            network.append(destination(entry))
        except ValueError as exc:
            raise UsageError(f"--network {exc}") from None
    env: dict[str, str] = {}
    for entry in getattr(args, "env", None) or []:
        name, sep, value = entry.partition("=")
        if not sep:
            raise UsageError(f"--env {entry[:100]!r} is not NAME=VALUE")
        env[name] = value
    try:
        check_env(env)
    except ValueError as exc:
        raise UsageError(f"--env {exc}") from None
    both = sorted(set(secrets) & set(env))
    if both:  # as the API refuses it: a value is either hidden (a secret) or shown (settings.env)
        raise UsageError(f"{both[0]} is given as --secret and as --env: a value is one or the other")
    return Judge(secrets, tuple(dict.fromkeys(network)), env)


def given(args: argparse.Namespace) -> bool:
    """Whether any of the judge options was given (a command that would not use them says so)."""
    return any(getattr(args, name, None) for name in ("secret", "network", "env"))


def _merged_settings(settings: Any, env: dict[str, str]) -> Any:
    if not env:
        return settings
    if isinstance(settings, dict):
        return {**settings, "env": {**(settings.get("env") or {}), **env}}
    return settings.model_copy(update={"env": {**settings.env, **env}})


def with_judge(definition: Definition, judge: Judge) -> Definition:
    """``definition`` with the judge's secrets, network and env added to its own."""
    return dataclasses.replace(
        definition,
        secrets=tuple(dict.fromkeys([*definition.secrets, *judge.secrets])),
        network=(*definition.network, *[d for d in judge.network if d not in definition.network]),
        settings=_merged_settings(definition.settings, judge.env),
    )


def with_judge_body(body: dict[str, Any], judge: Judge) -> dict[str, Any]:
    """An evaluator's JSON body with the judge's secrets, network and env (a ``--data`` run)."""
    changed = dict(body)
    if judge.secrets:
        changed["secrets"] = list(judge.secrets)
    if judge.network:
        changed["network"] = list(judge.network)
    if judge.env:
        changed["settings"] = _merged_settings(body.get("settings") or {}, judge.env)
    return changed


def private_settings(judge: Judge) -> Settings:
    """This environment's settings, the judge's hosts added to the default workspace's allowlist."""
    from evaluator_host.settings import Settings

    settings = Settings()
    if not judge.network:
        return settings
    return settings.model_copy(update={"network_allow": [*settings.network_allow, *judge.network]})


async def start_private(judge: Judge) -> Services:
    """A private in-process service (``Services.start_private``) ready for ``judge``: its hosts allowed, its
    secrets put in the default workspace from this environment."""
    from evaluator_host.services import Services
    from evaluator_host.tenancy.models import DEFAULT_WORKSPACE

    services = Services.start_private(private_settings(judge))
    try:
        for name in judge.secrets:
            await services.vault.put(DEFAULT_WORKSPACE, name, os.environ[name])
    except BaseException:
        await services.close()
        raise
    return services
