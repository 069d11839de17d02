"""`voxgate serve`'s settings, defined once (gateway/settings.py): the command line, VOXGATE_*
variables and a TOML file, their precedence, and the --help grouping."""

from __future__ import annotations

import pytest

from gateway.cli import build_parser, main
from gateway.serve_cli import settings_from_args
from gateway.settings import options


def settings(*argv: str, environ: dict | None = None):
    return settings_from_args(build_parser().parse_args(["serve", *argv]), environ=environ or {})


def test_command_line_beats_environment_beats_file_beats_default(tmp_path):
    config = tmp_path / "voxgate.toml"
    config.write_text(
        'port = 9100\nmax_num_seqs = 32\nmodel = "tiny-orpheus"\nllm_priority = false\n'
        "first_audio_budget = 0.5\n"
    )
    environ = {"VOXGATE_PORT": "9200", "VOXGATE_MAX_NUM_SEQS": "48"}
    s = settings("--config", str(config), "--port", "9300", environ=environ)
    assert s.port == 9300  # command line
    assert s.engine.max_num_seqs == 48  # environment over the file
    assert s.model == "tiny-orpheus" and not s.engine.llm_stream_priority  # the file
    assert s.engine.first_audio_budget_s == 0.5
    assert s.engine.max_batch_tokens == 4096 and s.host == "127.0.0.1"  # defaults
    assert settings("--config", str(config), "--llm-priority").engine.llm_stream_priority


def test_flags_that_set_a_field_by_another_name_work_from_every_source(tmp_path):
    config = tmp_path / "voxgate.toml"
    config.write_text('eager = true\nallowed_origin = ["https://a.example.com"]\n')
    s = settings("--config", str(config), environ={"VOXGATE_START_TIMEOUT": "2.5"})
    assert s.engine.cuda_graphs is False  # --eager: no CUDA graphs
    assert s.allowed_origins == ("https://a.example.com",)
    assert s.start_timeout_s == 2.5
    assert settings(environ={"VOXGATE_EAGER": "no"}).engine.cuda_graphs is True
    assert settings(environ={"VOXGATE_FIRST_HOP_TOKENS": "12"}).engine.load_options == {
        "first_hop_tokens": 12
    }


def test_api_keys_from_every_source_add_up(tmp_path):
    config = tmp_path / "voxgate.toml"
    config.write_text('api_key = ["k-file", "k-one"]\n')
    s = settings(
        "--config", str(config), "--api-key", "k-one", environ={"VOXGATE_API_KEYS": "k-env"}
    )
    assert s.api_keys == ("k-one", "k-env", "k-file")


def test_the_twilio_token_comes_from_the_environment_only(tmp_path):
    config = tmp_path / "voxgate.toml"
    config.write_text('twilio_auth_token = "secret"\n')
    with pytest.raises(ValueError, match="unknown setting 'twilio_auth_token'"):
        settings("--config", str(config))
    assert settings(environ={"VOXGATE_TWILIO_AUTH_TOKEN": "t"}).twilio_auth_token == "t"


@pytest.mark.parametrize(
    "text, words",
    [
        ("max_num_seq = 4\n", "unknown setting 'max_num_seq' (did you mean 'max_num_seqs'?)"),
        ("[engine]\npolicy = 'slack'\n", "unknown setting 'engine'"),
        ('port = "80"\n', "port must be int, got '80'"),
        ("eager = 1\n", "eager must be true or false"),
        ("port = 70000\n", "voxgate.toml: port (--port) must be in [0, 65535], got 70000"),
        ("first_hop_tokens = 0\n", "first_hop_tokens (--first-hop-tokens) must be >= 1"),
        ("port = \n", "not valid TOML"),
    ],
)
def test_a_bad_file_is_a_one_line_error_naming_file_and_key(tmp_path, capsys, text, words):
    config = tmp_path / "voxgate.toml"
    config.write_text(text)
    assert main(["serve", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err


def test_a_missing_file_and_bad_variables_are_clear(tmp_path, monkeypatch, capsys):
    assert main(["serve", "--config", str(tmp_path / "none.toml")]) == 2
    assert "cannot read it" in capsys.readouterr().err
    with pytest.raises(ValueError, match=r"\$VOXGATE_MAX_NUM_SEQS must be int, got 'many'"):
        settings(environ={"VOXGATE_MAX_NUM_SEQS": "many"})
    with pytest.raises(ValueError, match=r"\$VOXGATE_CPU_INT8 must be true or false"):
        settings(environ={"VOXGATE_CPU_INT8": "maybe"})
    # Variables that are no setting are left alone.
    assert settings(environ={"VOXGATE_CACHE": "/tmp/x"}).port == 8000


@pytest.mark.parametrize(
    "argv, environ, text, words",
    [
        (["--lead-ms", "-5"], {}, "", "--lead-ms must be in [0, 60000], got -5"),
        (["--max-batch-tokens", "0"], {}, "", "--max-batch-tokens must be >= 1, got 0"),
        (["--policy", "fcfs", "--max-num-seqs", "0"], {}, "", "--max-num-seqs must be >= 1, got 0"),
        (
            [],
            {"VOXGATE_START_TIMEOUT": "0"},
            "",
            "$VOXGATE_START_TIMEOUT (--start-timeout) must be in [0.1, 3600], got 0.0",
        ),
        (
            [],
            {},
            "first_audio_budget = -1\n",
            "voxgate.toml: first_audio_budget (--first-audio-budget) must be >= 0, got -1.0",
        ),
        (["--snac-chunk-ramp", "0"], {}, "", "--snac-chunk-ramp must be in (0, 1], got 0.0"),
        # Given in the file but overridden on the command line: the command line's is named.
        (
            ["--max-detok-batch", "0"],
            {},
            "max_detok_batch = 8\n",
            "--max-detok-batch must be >= 1, got 0",
        ),
    ],
)
def test_a_bad_value_names_the_option_as_the_user_set_it(tmp_path, argv, environ, text, words):
    """The flag (and the variable or the file's key it came from), and the value refused."""
    config = tmp_path / "voxgate.toml"
    config.write_text(text)
    with pytest.raises(ValueError) as refused:
        settings("--config", str(config), *argv, environ=environ)
    assert str(refused.value).endswith(words), str(refused.value)


def test_a_bad_value_given_to_the_dataclass_names_its_field():
    """Embedders and tests build EngineConfig and GatewaySettings directly: the field's name."""
    from engine.config import EngineConfig
    from gateway.config import GatewaySettings

    with pytest.raises(ValueError, match=r"^max_batch_tokens must be >= 1, got 0$"):
        EngineConfig(max_batch_tokens=0)
    with pytest.raises(ValueError, match=r"^start_timeout_s must be in \[0.1, 3600\], got 0$"):
        GatewaySettings(start_timeout_s=0)


def test_help_shows_the_user_options_first_and_groups_the_expert_ones(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--help"])
    text = capsys.readouterr().out
    expert_at = text.index("expert: ")
    for flag in ("--model", "--device", "--host", "--port", "--api-key", "--voices-dir"):
        assert text.index(f"  {flag}") < expert_at, flag
    for flag in ("--gil-switch-ms", "--llm-priority", "--steady-batch-rows", "--first-hop-tokens"):
        assert text.index(f"  {flag}") > expert_at, flag
    assert "expert: engine" in text and "expert: CosyVoice 2 models" in text
    assert 10 <= sum(not o.expert for o in options()) <= 15  # the dozen a user needs first


def test_every_option_has_one_flag_and_key():
    found = options()
    assert len({o.flag for o in found}) == len({o.key for o in found}) == len(found)
    assert {"--eager", "--llm-priority", "--trace-requests", "--first-audio-budget"} <= {
        o.flag for o in found
    }


def test_api_keys_come_from_the_variable_the_naming_rule_gives_and_from_the_old_one():
    assert settings(environ={"VOXGATE_API_KEY": "s3cret"}).api_keys == ("s3cret",)
    assert settings(environ={"VOXGATE_API_KEYS": "a,b"}).api_keys == ("a", "b")
    both = {"VOXGATE_API_KEY": "k1", "VOXGATE_API_KEYS": "k2 k1"}
    assert settings(environ=both).api_keys == ("k1", "k2")  # both are accepted


def test_an_unknown_voxgate_variable_is_reported_with_the_closest_name(caplog):
    from gateway.serve_cli import warn_unknown_environment

    environ = {"VOXGATE_PORTT": "9000", "VOXGATE_PORT": "9001", "HOME": "/root"}
    with caplog.at_level("WARNING", logger="voxgate.gateway"):
        warn_unknown_environment(environ)
    (line,) = caplog.messages
    assert "$VOXGATE_PORTT is not a voxgate setting and is ignored" in line
    assert "did you mean VOXGATE_PORT?" in line
    assert settings(environ=environ).port == 9001  # reported, never refused


def test_every_voxgate_variable_the_repository_reads_is_known():
    import re
    import subprocess
    from pathlib import Path

    from gateway.settings import OTHER_ENVIRONMENT, unknown_environment

    root = Path(__file__).resolve().parents[2]
    files = subprocess.run(
        ["git", "ls-files", "*.py", "*.yml", "*.toml", "*.sh", "Dockerfile*", "Makefile"],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    read = re.compile(r"(?:[\"'${]|- )(VOXGATE_[A-Z0-9_]*[A-Z0-9])\b")  # quoted, $X, ${X}, - X=
    names = set()
    for name in files:
        path = root / name
        if path.is_file() and path != Path(__file__).resolve():  # this file mistypes on purpose
            names |= set(read.findall(path.read_text()))
    assert "VOXGATE_CACHE" in names and "VOXGATE_CACHE" in OTHER_ENVIRONMENT
    assert unknown_environment(dict.fromkeys(names, "x")) == []
