"""Settings: precedence, parsing errors, and .env.example listing every setting with its default."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pipeline.errors import UsageError
from pipeline.settings import Settings, read_env_file

ROOT = Path(__file__).resolve().parent.parent


def test_precedence_is_flags_then_environment_then_dotenv_then_defaults(tmp_path):
    env_file = tmp_path / ".env"
    env_file.write_text('# comment\nTOP_N=5\nexport LOG_LEVEL="DEBUG"\nOUTPUT_DIR=/from/dotenv\n')
    settings = Settings.load({"output_dir": "/from/flag"}, environ={"TOP_N": "7"}, env_file=env_file)
    assert settings.top_n == 7
    assert settings.log_level == "DEBUG"
    assert settings.output_dir == Path("/from/flag")
    assert settings.semrush_base_url == "https://www.semrush.com"


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"TOP_N": "many"}, "TOP_N='many' is not a valid int"),
        ({"TOP_N": "21"}, "TOP_N must be between 1 and 20"),
        ({"ALLOW_PRIVATE_ADDRESSES": "maybe"}, "ALLOW_PRIVATE_ADDRESSES"),
        ({"LOG_FORMAT": "xml"}, "LOG_FORMAT must be json or text"),
        ({"SITE_URL_TEMPLATE": "https://example.com/"}, "must contain {domain}"),
        ({"READ_TIMEOUT": "0"}, "READ_TIMEOUT must be positive"),
    ],
)
def test_bad_values_name_the_setting(environ, message):
    with pytest.raises(UsageError, match=message.replace("{", r"\{").replace("}", r"\}")):
        Settings.load(environ=environ, env_file=os.devnull)


def test_env_example_lists_every_setting_with_its_default():
    listed = read_env_file(ROOT / ".env.example")
    names = [name for name, _, _ in Settings.describe()]
    assert list(listed) == names
    from_example = Settings.load(environ={}, env_file=ROOT / ".env.example")
    defaults = Settings.load(environ={}, env_file=os.devnull)
    assert from_example == defaults


def test_to_environ_round_trips():
    settings = Settings.load({"top_n": 3, "allow_private_addresses": True}, environ={}, env_file=os.devnull)
    assert Settings.load(environ=settings.to_environ(), env_file=os.devnull) == settings
