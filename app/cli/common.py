"""Helpers shared by the command groups (settings with a one-line error, logging)."""

from __future__ import annotations

import logging

import typer

from app.config import SettingsError, load_settings


def _settings(**overrides):
    try:
        return load_settings(**{k: v for k, v in overrides.items() if v is not None})
    except SettingsError as exc:
        typer.echo(f"dpicl: {exc}", err=True)
        raise typer.Exit(2)


def _configure_logging(level: str) -> None:
    logging.basicConfig(level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
